/* spawn: start another program twice, with fork+execv and with posix_spawn (which
 * glibc implements with clone(CLONE_VM | CLONE_VFORK)), and keep allocating in the
 * parent afterwards.
 *
 * Usage: spawn PROGRAM [ARGS...]   (the tests pass the `tiny` program)
 *
 * Ground truth for the spawn process itself (views at exit):
 *   path                        alloc_space  alloc_objects  space  objects
 *   main > before_spawn             1000           10        1000      10
 *   main > after_spawn              2000           20        2000      20
 * Each started PROGRAM is its own process with its own ground truth (tiny's).
 * stdout: "fork+exec exited 0\nposix_spawn exited 0\nparent pid P\n" (P tells the
 * parent apart from a profiled fork child). Exit status 0 when both children exited 0.
 * `--print-truth` prints the two lines above and exits without allocating.
 */
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "truth.h"

extern char **environ;
static void *blocks[30];

static void before_spawn(void) {
  for (int i = 0; i < 10; i++) blocks[i] = malloc(100);
}
static void after_spawn(void) {
  for (int i = 0; i < 20; i++) blocks[10 + i] = malloc(100);
}

static int status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("before_spawn", 1000, 10, 1000, 10);
    truth_line("after_spawn", 2000, 20, 2000, 20);
    return 0;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: spawn PROGRAM [ARGS...]\n");
    return 2;
  }
  before_spawn();
  fflush(stdout);

  int status = 0;
  pid_t pid = fork();
  if (pid < 0) abort();
  if (pid == 0) {
    execv(argv[1], argv + 1);
    _exit(127);
  }
  if (waitpid(pid, &status, 0) != pid) abort();
  int exec_code = status_code(status);
  printf("fork+exec exited %d\n", exec_code);
  fflush(stdout);

  if (posix_spawn(&pid, argv[1], NULL, NULL, argv + 1, environ) != 0) abort();
  if (waitpid(pid, &status, 0) != pid) abort();
  int spawn_code = status_code(status);
  printf("posix_spawn exited %d\n", spawn_code);

  after_spawn();
  printf("parent pid %d\n", (int)getpid());
  return exec_code == 0 && spawn_code == 0 ? 0 : 1;
}
