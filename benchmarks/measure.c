/* measure: run a command and report the rusage of its whole process tree.
 *
 * Usage: measure OUT_FILE CMD [ARGS...]
 * Writes "utime_s stime_s maxrss_kib" for CMD and every descendant it waited for
 * to OUT_FILE, and exits with CMD's status (128+N if killed by signal N).
 *
 * Why not os.wait4 from Python: a child exec'd straight from the Python harness
 * inherits the harness's RSS high-water mark (ru_maxrss survives exec), which
 * would put an ~18 MiB floor under every small program. A child forked from this
 * small process starts from its own mark.
 */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: measure OUT_FILE CMD [ARGS...]\n");
    return 2;
  }
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    perror(argv[2]);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid) return 2;
  FILE *out = fopen(argv[1], "w");
  if (out == NULL) return 2;
  fprintf(out, "%.6f %.6f %ld\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
          ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, ru.ru_maxrss);
  fclose(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
