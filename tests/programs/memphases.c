/* memphases: memory over time with a known shape, for the series (heapscope_memory_series)
 * and the flamegraph's range selection.
 *
 * Usage: memphases [CTL [HOLD_MS]] (hold: default 150)
 * With CTL (a FIFO), it waits for a line from it before the phases and for another before
 * exiting (`heapscope live`'s tests read the screen meanwhile).
 *   t = 0          phase_one allocates X = 64 x 64 KiB (4 MiB) and holds it;
 *   t = HOLD       phase_one's blocks are freed, then mark() allocates 8 KiB (kept): the
 *                  free has no time of its own on the wire, so a malloc after it dates it;
 *   t = 2 HOLD     phase_two allocates 2X = 128 x 64 KiB and holds it;
 *   t = 3 HOLD     phase_two's blocks are freed, then mark() again; exit.
 * Blocks of 64 KiB are above the default sampling interval: each is sampled at its size, so
 * the series is exact up to the few small allocations of libc itself. The waits are the
 * program's own phases (nanosleep), not synchronisation with anything.
 *
 * Ground truth (views at exit):
 *   path                      alloc_space  alloc_objects  space   objects
 *   main > phase_one             4194304           64         0        0
 *   main > phase_two             8388608          128         0        0
 *   main > mark                    16384            2     16384        2
 * `--print-truth` prints these lines and exits without allocating.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "truth.h"

#define BLOCK (64 * 1024)
#define N1 64
#define MARK 8192 /* above the default interval too: sampled always, so it dates the free */

static void *blocks[2 * N1];
static void *marks[2];

static void hold(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void phase_one(void) {
  for (int i = 0; i < N1; i++) blocks[i] = malloc(BLOCK);
}

static void phase_two(void) {
  for (int i = 0; i < 2 * N1; i++) blocks[i] = malloc(BLOCK);
}

static void release(int n) {
  for (int i = 0; i < n; i++) free(blocks[i]);
}

static void mark(int k) { marks[k] = malloc(MARK); }

/* One line from the control FIFO (or its end). */
static void await_line(int fd) {
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') {
  }
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("phase_one", (long long)N1 * BLOCK, N1, 0, 0);
    truth_line("phase_two", 2LL * N1 * BLOCK, 2 * N1, 0, 0);
    truth_line("mark", 2 * MARK, 2, 2 * MARK, 2);
    return 0;
  }
  int ctl = argc > 1 ? open(argv[1], O_RDONLY) : -1;
  long ms = argc > 2 ? atol(argv[2]) : 150;
  if (argc > 1 && ctl < 0) return 2;
  if (ctl >= 0) await_line(ctl);
  phase_one();
  hold(ms);
  release(N1);
  mark(0);
  hold(ms);
  phase_two();
  hold(ms);
  release(2 * N1);
  mark(1);
  truth_sink = marks[0];
  if (ctl >= 0) await_line(ctl);
  return 0;
}
