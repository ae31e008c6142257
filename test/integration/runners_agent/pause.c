/* The pod sandbox's process for the CRI test's private containerd (its sandbox_image): holds
 * the pod's namespaces until it is stopped, as registry.k8s.io/pause does, so the test never
 * needs that registry. SIGTERM and SIGINT end it at once. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

int main(void) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  for (;;) pause();
}
