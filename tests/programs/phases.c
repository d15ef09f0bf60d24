/* phases: a target that keeps running when its profiler dies.
 *
 * Usage: phases DONE_FILE
 *   phase 1: phase_one allocates 1000 x 100 bytes (kept), then writes
 *            "phase 1 done\n" to stdout and waits for one line on stdin;
 *   phase 2: phase_two mallocs and frees 200000 x 64 bytes and keeps 1000 x 100,
 *            writes "phase 2 done\n" to stdout, then writes "ok\n" to DONE_FILE
 *            and exits 0.
 * The line read from stdin is echoed as "got: LINE\n" before phase 2.
 *
 * Ground truth (views at exit, if the profiler lives that long):
 *   path                      alloc_space  alloc_objects  space   objects
 *   main > phase_one             100000         1000      100000     1000
 *   main > phase_two           12900000       201000      100000     1000
 * `--print-truth` prints these lines and exits without allocating.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "truth.h"

static void *kept[2000];

static void put(int fd, const char *s) {
  size_t n = strlen(s);
  if (write(fd, s, n) != (ssize_t)n) abort();
}

static void phase_one(void) {
  for (int i = 0; i < 1000; i++) kept[i] = malloc(100);
}

static void phase_two(void) {
  for (int i = 0; i < 200000; i++) {
    void *p = malloc(64);
    truth_sink = p;
    free(p);
  }
  for (int i = 0; i < 1000; i++) kept[1000 + i] = malloc(100);
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("phase_one", 100000, 1000, 100000, 1000);
    truth_line("phase_two", 12900000, 201000, 100000, 1000);
    return 0;
  }
  if (argc != 2) {
    put(2, "usage: phases DONE_FILE\n");
    return 2;
  }
  phase_one();
  put(1, "phase 1 done\n");
  char line[256];
  size_t n = 0;
  while (n < sizeof line - 1) {
    ssize_t r = read(0, line + n, 1);
    if (r <= 0 || line[n] == '\n') break;
    n++;
  }
  line[n] = 0;
  put(1, "got: ");
  put(1, line);
  put(1, "\n");
  phase_two();
  put(1, "phase 2 done\n");
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  put(fd, "ok\n");
  close(fd);
  return 0;
}
