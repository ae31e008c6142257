/* The runner-agent tests' workload: a tiny static program packed into an OCI image by
 * src/localregistry/localregistry.cc. Its arguments are commands, run in order:
 *   print:TEXT      write TEXT and a newline to stdout
 *   eprint:TEXT     write TEXT and a newline to stderr
 *   env:NAME        print NAME=value (or NAME unset)
 *   args            print every argument
 *   cat:PATH        print the file's contents (or "cat PATH: error")
 *   write:PATH      create PATH with "ok" (prints "write PATH: error" when it cannot)
 *   sleep:SECONDS   sleep
 *   exit:CODE       exit with CODE
 * With no arguments it prints "hstest" and exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc < 2) {
    puts("hstest");
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strncmp(a, "print:", 6) == 0) {
      printf("%s\n", a + 6);
    } else if (strncmp(a, "eprint:", 7) == 0) {
      fprintf(stderr, "%s\n", a + 7);
    } else if (strncmp(a, "env:", 4) == 0) {
      const char* v = getenv(a + 4);
      if (v) printf("%s=%s\n", a + 4, v); else printf("%s unset\n", a + 4);
    } else if (strcmp(a, "args") == 0) {
      for (int j = 0; j < argc; ++j) printf("arg[%d]=%s\n", j, argv[j]);
    } else if (strncmp(a, "cat:", 4) == 0) {
      FILE* f = fopen(a + 4, "r");
      if (!f) { printf("cat %s: %s\n", a + 4, strerror(errno)); continue; }
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
      fclose(f);
      printf("\n");
    } else if (strncmp(a, "write:", 6) == 0) {
      int fd = open(a + 6, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || write(fd, "ok", 2) != 2) printf("write %s: %s\n", a + 6, strerror(errno));
      else printf("write %s: ok\n", a + 6);
      if (fd >= 0) close(fd);
    } else if (strncmp(a, "sleep:", 6) == 0) {
      sleep((unsigned)atoi(a + 6));
    } else if (strncmp(a, "exit:", 5) == 0) {
      return atoi(a + 5);
    } else {
      printf("unknown command %s\n", a);
    }
  }
  return 0;
}
