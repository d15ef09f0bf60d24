/* sampled: enough volume per path to check the Poisson byte sampler at the default
 * interval (4096): many small allocations are estimated, allocations of at least the
 * interval are recorded exactly.
 *
 * Ground truth (views at exit, true bytes; the sampled estimate of a path of small
 * allocations has standard deviation about sqrt(interval * bytes)):
 *   path                          alloc_space  alloc_objects     space  objects
 *   main > path_small64             12800000        200000   12800000   200000
 *       200000 x malloc(64), kept
 *   main > path_med512              25600000         50000   12800000    25000
 *       50000 x malloc(512), every other one freed
 *   main > path_page                  409600           100     409600      100
 *       100 x malloc(4096), kept (size == default interval: recorded exactly)
 *   main > path_huge                 8388608             8    5242880        5
 *       8 x malloc(1 MiB), 3 freed (recorded exactly)
 * `--print-truth` prints these lines and exits without allocating.
 */
#include <stdlib.h>

#include "truth.h"

#define SMALL_N 200000
#define MED_N 50000
#define PAGE_N 100
#define HUGE_N 8
#define HUGE_FREED 3

static void *small_blocks[SMALL_N];
static void *med_blocks[MED_N];
static void *page_blocks[PAGE_N];
static void *huge_blocks[HUGE_N];

static void alloc64(void) {
  for (int i = 0; i < SMALL_N; i++) small_blocks[i] = malloc(64);
}
static void path_small64(void) { alloc64(); }

static void alloc512(void) {
  for (int i = 0; i < MED_N; i++) {
    med_blocks[i] = malloc(512);
    if (i % 2 == 1) free(med_blocks[i - 1]);
  }
}
static void path_med512(void) { alloc512(); }

static void alloc_page(void) {
  for (int i = 0; i < PAGE_N; i++) page_blocks[i] = malloc(4096);
}
static void path_page(void) { alloc_page(); }

static void alloc_huge(void) {
  for (int i = 0; i < HUGE_N; i++) huge_blocks[i] = malloc(1 << 20);
  for (int i = 0; i < HUGE_FREED; i++) free(huge_blocks[i]);
}
static void path_huge(void) { alloc_huge(); }

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("path_small64", SMALL_N * 64LL, SMALL_N, SMALL_N * 64LL, SMALL_N);
    truth_line("path_med512", MED_N * 512LL, MED_N, MED_N / 2 * 512LL, MED_N / 2);
    truth_line("path_page", PAGE_N * 4096LL, PAGE_N, PAGE_N * 4096LL, PAGE_N);
    truth_line("path_huge", HUGE_N * (1LL << 20), HUGE_N, (HUGE_N - HUGE_FREED) * (1LL << 20),
               HUGE_N - HUGE_FREED);
    return 0;
  }
  path_small64();
  path_med512();
  path_page();
  path_huge();
  return 0;
}
