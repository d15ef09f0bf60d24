/* rsspeak: a peak of resident memory in the last moments of a process, for the
 * peak RSS that `record` reports (tests/integration/test_rss.py).
 *
 * fill() mallocs 100 blocks of 1 MiB and writes every byte, then the program
 * prints its own peak RSS as the kernel has it (`hwm KIB`, VmHWM of
 * /proc/self/status, on stderr) and ends within a few milliseconds:
 *   (no argument)  frees the blocks and returns from main (exit handlers run)
 *   exit           calls _exit(0) (no exit handler runs)
 *   kill           SIGKILLs itself (no exit handler runs)
 *   grandchild [exit]  forks and execs this program (with `exit` when
 *                  given) in the child, waits for it, returns; the parent
 *                  holds little
 *   records N      N malloc(64) + free pairs (at interval 1: N of each record,
 *                  88 bytes of ring a pair), then returns; no peak of note
 *
 * Ground truth (no argument, views at exit):
 *   path            alloc_space  alloc_objects  space  objects
 *   main > fill      104857600        100          0       0
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "truth.h"

#define BLOCKS 100
#define BLOCK (1 << 20)

static char *blocks[BLOCKS];

static void fill(void) {
  for (int i = 0; i < BLOCKS; i++) {
    blocks[i] = malloc(BLOCK);
    memset(blocks[i], 1, BLOCK);
  }
}

static void print_hwm(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0)
      fprintf(stderr, "hwm %ld\n", strtol(line + 6, NULL, 10));
  if (f)
    fclose(f);
}

static void churn(long n) {
  for (long i = 0; i < n; i++) {
    void *p = malloc(64);
    truth_sink = p;
    free(p);
  }
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("fill", (long long)BLOCKS * BLOCK, BLOCKS, 0, 0);
    return 0;
  }
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "grandchild") == 0) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], argc > 2 ? argv[2] : (char *)NULL, (char *)NULL);
      _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
      return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  if (strcmp(mode, "records") == 0) {
    churn(argc > 2 ? atol(argv[2]) : 0);
    return 0;
  }
  fill();
  print_hwm();
  if (strcmp(mode, "exit") == 0)
    _exit(0);
  if (strcmp(mode, "kill") == 0)
    raise(SIGKILL);
  for (int i = 0; i < BLOCKS; i++)
    free(blocks[i]);
  return 0;
}
