/* peakfree: a peak in the middle of the run, all of it freed before exit.
 *
 * Usage: peakfree
 *   hold_small keeps 4000 x 256 bytes and hold_big 16 x 64 KiB: the peak
 *   (2,072,576 bytes live); then both are freed, and leftover keeps 10 x 50
 *   bytes to the end (what a report of the exit state alone would show).
 *
 * Ground truth at interval 1 (views at exit, as truth.h defines them):
 *   path                    alloc_space  alloc_objects  space  objects
 *   main > hold_small           1024000          4000       0        0
 *   main > hold_big             1048576            16       0        0
 *   main > leftover                 500            10     500       10
 * At the peak, hold_small holds 1024000 bytes in 4000 allocations and
 * hold_big 1048576 in 16 (and leftover nothing yet).
 */
#include <stdlib.h>

#include "truth.h"

#define SMALL_N 4000
#define SMALL_SIZE 256
#define BIG_N 16
#define BIG_SIZE 65536
#define LEFT_N 10
#define LEFT_SIZE 50

static void *small[SMALL_N], *big[BIG_N], *left[LEFT_N];

__attribute__((noinline)) static void hold_small(void) {
  for (int i = 0; i < SMALL_N; i++) small[i] = malloc(SMALL_SIZE);
}

__attribute__((noinline)) static void hold_big(void) {
  for (int i = 0; i < BIG_N; i++) big[i] = malloc(BIG_SIZE);
}

__attribute__((noinline)) static void release(void) {
  for (int i = 0; i < SMALL_N; i++) free(small[i]);
  for (int i = 0; i < BIG_N; i++) free(big[i]);
}

__attribute__((noinline)) static void leftover(void) {
  for (int i = 0; i < LEFT_N; i++) left[i] = malloc(LEFT_SIZE);
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("hold_small", (long long)SMALL_N * SMALL_SIZE, SMALL_N, 0, 0);
    truth_line("hold_big", (long long)BIG_N * BIG_SIZE, BIG_N, 0, 0);
    truth_line("leftover", (long long)LEFT_N * LEFT_SIZE, LEFT_N, LEFT_N * LEFT_SIZE, LEFT_N);
    return 0;
  }
  hold_small();
  hold_big();
  release();
  leftover();
  truth_sink = left[0];
  return 0;
}
