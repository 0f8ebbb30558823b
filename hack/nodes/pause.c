/* The pods' sandbox (infra) process: holds the pod's namespaces, reaps the orphans a shared PID
 * namespace hands it, and exits on SIGINT or SIGTERM. Built static (musl-gcc) into the sandbox
 * image by hack/nodes/images.sh; containerd's sandbox_image names it. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { _exit(sig == SIGTERM || sig == SIGINT ? 0 : 1); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction on_stop = {.sa_handler = stop};
  struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  if (sigaction(SIGINT, &on_stop, NULL) || sigaction(SIGTERM, &on_stop, NULL) ||
      sigaction(SIGCHLD, &on_child, NULL)) {
    return 1;
  }
  for (;;) {
    pause();
  }
}
