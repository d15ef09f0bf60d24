/* record_fanout.c: many processes in one recording.
 *
 *   record_fanout together N   start N children (fork + exec of this
 *       program); each allocates, says so on a shared pipe and waits until
 *       the parent closes a second pipe: all N are alive (and connected to
 *       the profiler) at once. Prints "all N ready", then lets them go.
 *   record_fanout serial N P   N short children in all, at most P at once.
 * Prints "done N" and exits 0 when every child exited 0, else exits 1.
 * The children are exec'ed, so each gets the client of its own (LD_PRELOAD).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static void child_work(void) {
  void *p = malloc(1000);
  memset(p, 3, 1000);
  free(malloc(3000));
  free(p);
}

static int child(int ready_fd, int go_fd) {
  child_work();
  if (ready_fd >= 0) {
    char c = 'r';
    if (write(ready_fd, &c, 1) != 1) return 2;
    close(ready_fd);
    char buf;
    while (read(go_fd, &buf, 1) > 0) {
    }
  }
  return 0;
}

static pid_t spawn(const char *self, int ready_fd, int go_fd) {
  pid_t pid = fork();
  if (pid == 0) {
    char r[16], g[16];
    snprintf(r, sizeof r, "%d", ready_fd);
    snprintf(g, sizeof g, "%d", go_fd);
    execl(self, self, "child", r, g, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int reap(void) {
  int status;
  if (wait(&status) < 0) return 1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 4 && strcmp(argv[1], "child") == 0) return child(atoi(argv[2]), atoi(argv[3]));
  if (argc < 3) return 2;
  int n = atoi(argv[2]), bad = 0;
  if (strcmp(argv[1], "together") == 0) {
    int ready[2], go[2];
    if (pipe(ready) || pipe(go)) return 2;
    /* The children keep only their ends: the go pipe must reach EOF. */
    fcntl(ready[0], F_SETFD, FD_CLOEXEC);
    fcntl(go[1], F_SETFD, FD_CLOEXEC);
    for (int i = 0; i < n; i++)
      if (spawn("/proc/self/exe", ready[1], go[0]) < 0) return 2;
    close(ready[1]);
    close(go[0]);
    int got = 0;
    char buf[256];
    while (got < n) {
      ssize_t k = read(ready[0], buf, sizeof buf);
      if (k <= 0) break;
      got += (int)k;
    }
    printf("all %d ready\n", got);
    close(go[1]);
    for (int i = 0; i < n; i++) bad |= reap();
  } else {
    int p = argc > 3 ? atoi(argv[3]) : 1, running = 0;
    for (int i = 0; i < n; i++) {
      if (running == p) {
        bad |= reap();
        running--;
      }
      if (spawn("/proc/self/exe", -1, -1) < 0) return 2;
      running++;
    }
    while (running-- > 0) bad |= reap();
  }
  printf("done %d\n", n);
  return bad;
}
