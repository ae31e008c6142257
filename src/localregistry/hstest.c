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
 *   serve:PORT:TEXT answer every TCP connection to PORT (any IPv4 address) with TEXT and a
 *                   newline, forever (prints "serving PORT" once listening)
 *   connect:IP:PORT print "connect IP:PORT: " and what the server sends (or the error)
 *   tty             print "tty=yes rows=R cols=C" when stdin is a terminal, else "tty=no"
 *   readline        read one line from stdin and print "line=<it>"
 *   token:AUD:NONCE ask the sealed runner's agent for an attestation token for audience AUD
 *                   (which may contain colons; NONCE may not) (POST /v1/token on
 *                   /run/hyperslice/teeserver.sock) and print "token=<JWT>", or
 *                   "token error: <status line or errno>"; with HS_TEE_KEY (64 hex) in the
 *                   environment the request binds that key (tee_pubkey_sha256)
 * With no arguments it prints "hstest" and exits 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* HTTP/1.1 over the agent's unix socket, Connection: close, the body read to the end. */
static void token(const char* spec) {
  char aud[512], nonce[256];
  const char* colon = strrchr(spec, ':'); /* the audience may hold colons, the nonce not */
  if (!colon || (size_t)(colon - spec) >= sizeof aud || strlen(colon + 1) >= sizeof nonce) {
    printf("token error: want token:AUDIENCE:NONCE\n");
    return;
  }
  memcpy(aud, spec, (size_t)(colon - spec));
  aud[colon - spec] = 0;
  strcpy(nonce, colon + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  strcpy(sa.sun_path, "/run/hyperslice/teeserver.sock");
  if (fd < 0 || connect(fd, (struct sockaddr*)&sa, sizeof sa) != 0) {
    printf("token error: connect: %s\n", strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  char body[1024], req[2048];
  /* HS_TEE_KEY: the hex SHA-256 of a key this workload holds, bound into the token. */
  const char* key = getenv("HS_TEE_KEY");
  int blen =
      key && *key
          ? snprintf(body, sizeof body,
                     "{\"audience\":\"%s\",\"nonces\":[\"%s\"],\"tee_pubkey_sha256\":\"%s\"}", aud,
                     nonce, key)
          : snprintf(body, sizeof body, "{\"audience\":\"%s\",\"nonces\":[\"%s\"]}", aud, nonce);
  int rlen =
      snprintf(req, sizeof req,
               "POST /v1/token HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
               blen, body);
  if (write(fd, req, (size_t)rlen) != rlen) {
    printf("token error: write: %s\n", strerror(errno));
    close(fd);
    return;
  }
  static char resp[16384];
  size_t have = 0;
  ssize_t n;
  while (have < sizeof resp - 1 && (n = read(fd, resp + have, sizeof resp - 1 - have)) > 0)
    have += (size_t)n;
  resp[have] = 0;
  close(fd);
  char* eol = strstr(resp, "\r\n");
  char* start = strstr(resp, "\r\n\r\n");
  if (!eol || !start || strncmp(resp, "HTTP/1.1 200", 12) != 0) {
    if (eol) *eol = 0;
    printf("token error: %s %s\n", resp, start ? start + 4 : "");
    return;
  }
  printf("token=%s\n", start + 4);
}

static void serve(const char* spec) {
  int port = atoi(spec);
  const char* text = strchr(spec, ':');
  text = text ? text + 1 : "";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((unsigned short)port);
  if (fd < 0 || bind(fd, (struct sockaddr*)&sa, sizeof sa) != 0 || listen(fd, 16) != 0) {
    printf("serve %d: %s\n", port, strerror(errno));
    return;
  }
  printf("serving %d\n", port);
  fflush(stdout);
  for (;;) {
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    if (write(c, text, strlen(text)) < 0 || write(c, "\n", 1) < 0) perror("write");
    close(c);
  }
}

static void connect_to(const char* spec) {
  char ip[64];
  const char* colon = strrchr(spec, ':');
  if (!colon || (size_t)(colon - spec) >= sizeof ip) {
    printf("connect error: want connect:IP:PORT\n");
    return;
  }
  memcpy(ip, spec, (size_t)(colon - spec));
  ip[colon - spec] = 0;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((unsigned short)atoi(colon + 1));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1 || fd < 0 ||
      connect(fd, (struct sockaddr*)&sa, sizeof sa) != 0) {
    printf("connect %s: error %s\n", spec, strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  char buf[512];
  ssize_t n, len = 0;
  while (len < (ssize_t)sizeof buf - 1 &&
         (n = read(fd, buf + len, sizeof buf - 1 - (size_t)len)) > 0)
    len += n;
  buf[len] = 0;
  close(fd);
  printf("connect %s: %s", spec, buf);
}

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
      if (v)
        printf("%s=%s\n", a + 4, v);
      else
        printf("%s unset\n", a + 4);
    } else if (strcmp(a, "args") == 0) {
      for (int j = 0; j < argc; ++j) printf("arg[%d]=%s\n", j, argv[j]);
    } else if (strncmp(a, "cat:", 4) == 0) {
      FILE* f = fopen(a + 4, "r");
      if (!f) {
        printf("cat %s: %s\n", a + 4, strerror(errno));
        continue;
      }
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
      fclose(f);
      printf("\n");
    } else if (strncmp(a, "write:", 6) == 0) {
      int fd = open(a + 6, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || write(fd, "ok", 2) != 2)
        printf("write %s: %s\n", a + 6, strerror(errno));
      else
        printf("write %s: ok\n", a + 6);
      if (fd >= 0) close(fd);
    } else if (strncmp(a, "sleep:", 6) == 0) {
      sleep((unsigned)atoi(a + 6));
    } else if (strncmp(a, "token:", 6) == 0) {
      token(a + 6);
    } else if (strncmp(a, "serve:", 6) == 0) {
      serve(a + 6);
    } else if (strncmp(a, "connect:", 8) == 0) {
      connect_to(a + 8);
    } else if (strcmp(a, "tty") == 0) {
      struct winsize ws;
      if (isatty(0) && ioctl(0, TIOCGWINSZ, &ws) == 0)
        printf("tty=yes rows=%d cols=%d\n", ws.ws_row, ws.ws_col);
      else
        printf("tty=no\n");
    } else if (strcmp(a, "readline") == 0) {
      char line[512];
      if (!fgets(line, sizeof line, stdin)) line[0] = 0;
      line[strcspn(line, "\r\n")] = 0;
      printf("line=%s\n", line);
    } else if (strncmp(a, "exit:", 5) == 0) {
      return atoi(a + 5);
    } else {
      printf("unknown command %s\n", a);
    }
  }
  return 0;
}
