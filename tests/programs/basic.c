/* basic: one allocating call path per malloc-family entry point, for exact checks
 * at sampling interval 1.
 *
 * Ground truth (heapprofd views at exit; function = a name found in the path's stack):
 *
 *   path (stack, outermost first)               alloc_space  alloc_objects  space    objects
 *   main > path_a > alloc_small                       48000           1000    48000      1000
 *       1000 x malloc(48), all kept
 *   main > path_b > path_c > alloc_big              3145728              3  1048576         1
 *       3 x malloc(1 MiB), 2 freed
 *   main > path_freeall > alloc_temp                  50000            500        0         0
 *       500 x malloc(100), all freed
 *   main > path_half > alloc_half                     20000            100    10000        50
 *       100 x malloc(200), every other one freed, in reverse order
 *   main > grow_buffer                                 8176              9     4096         1
 *       realloc(NULL, 16), then realloc to 32, 64, ... 4096; each realloc frees the
 *       old block (8 frees, 4080 bytes) and allocates the new one
 *   main > use_calloc                                  2000             10     2000        10
 *       10 x calloc(25, 8), kept
 *   main > use_posix_memalign                          4000              4     4000         4
 *       4 x posix_memalign(64, 1000), kept
 *   main > use_aligned_alloc                           4096              4     4096         4
 *       4 x aligned_alloc(128, 1024), kept
 *   main > use_memalign                                 600              2      600         2
 *       2 x memalign(256, 300), kept
 *   main > use_valloc                                 10000              2    10000         2
 *       2 x valloc(5000), kept
 *   main > use_pvalloc                        2 x round_up(5000, page)   2   (same)         2
 *       2 x pvalloc(5000), kept; pvalloc reports the size rounded up to the page
 *       (16384 with 4 KiB pages)
 *
 * Each allocating function contains exactly one call site per entry point, so with
 * the seed's example query (grouping by leaf callsite) every path above is one row,
 * except grow_buffer (two realloc call sites) — see truth for the whole function.
 * `--print-truth` prints these lines and exits without allocating.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#include "truth.h"

#define SMALL_N 1000
#define SMALL_SIZE 48
#define BIG_N 3
#define BIG_SIZE (1024 * 1024)
#define BIG_FREED 2
#define TEMP_N 500
#define TEMP_SIZE 100
#define HALF_N 100
#define HALF_SIZE 200
#define GROW_FIRST 16
#define GROW_LAST 4096
#define CALLOC_N 10
#define CALLOC_NMEMB 25
#define CALLOC_SIZE 8
#define PMA_N 4
#define PMA_ALIGN 64
#define PMA_SIZE 1000
#define AA_N 4
#define AA_ALIGN 128
#define AA_SIZE 1024
#define MA_N 2
#define MA_ALIGN 256
#define MA_SIZE 300
#define VA_N 2
#define VA_SIZE 5000
#define PVA_N 2
#define PVA_SIZE 5000

static void *small_blocks[SMALL_N];
static void *big_blocks[BIG_N];
static void *temp_blocks[TEMP_N];
static void *half_blocks[HALF_N];
static void *kept[64];
static int n_kept;

static void alloc_small(void) {
  for (int i = 0; i < SMALL_N; i++) small_blocks[i] = malloc(SMALL_SIZE);
}

static void path_a(void) { alloc_small(); }

static void alloc_big(void) {
  for (int i = 0; i < BIG_N; i++) big_blocks[i] = malloc(BIG_SIZE);
  for (int i = 0; i < BIG_FREED; i++) free(big_blocks[i]);
}

static void path_c(void) { alloc_big(); }
static void path_b(void) { path_c(); }

static void alloc_temp(void) {
  for (int i = 0; i < TEMP_N; i++) temp_blocks[i] = malloc(TEMP_SIZE);
  for (int i = 0; i < TEMP_N; i++) free(temp_blocks[i]);
}

static void path_freeall(void) { alloc_temp(); }

static void alloc_half(void) {
  for (int i = 0; i < HALF_N; i++) half_blocks[i] = malloc(HALF_SIZE);
  for (int i = HALF_N - 1; i >= 0; i -= 2) free(half_blocks[i]);
}

static void path_half(void) { alloc_half(); }

static void grow_buffer(void) {
  char *p = realloc(NULL, GROW_FIRST);
  for (size_t size = GROW_FIRST * 2; size <= GROW_LAST; size *= 2) {
    p = realloc(p, size);
    p[size - 1] = 1;
  }
  kept[n_kept++] = p;
}

static void use_calloc(void) {
  for (int i = 0; i < CALLOC_N; i++) kept[n_kept++] = calloc(CALLOC_NMEMB, CALLOC_SIZE);
}

static void use_posix_memalign(void) {
  for (int i = 0; i < PMA_N; i++) {
    void *p = NULL;
    if (posix_memalign(&p, PMA_ALIGN, PMA_SIZE) != 0) abort();
    kept[n_kept++] = p;
  }
}

static void use_aligned_alloc(void) {
  for (int i = 0; i < AA_N; i++) kept[n_kept++] = aligned_alloc(AA_ALIGN, AA_SIZE);
}

static void use_memalign(void) {
  for (int i = 0; i < MA_N; i++) kept[n_kept++] = memalign(MA_ALIGN, MA_SIZE);
}

static void use_valloc(void) {
  for (int i = 0; i < VA_N; i++) kept[n_kept++] = valloc(VA_SIZE);
}

static void use_pvalloc(void) {
  for (int i = 0; i < PVA_N; i++) kept[n_kept++] = pvalloc(PVA_SIZE);
}

static void print_truth(void) {
  long long page = sysconf(_SC_PAGESIZE);
  long long grow_alloc = 0, grow_n = 0;
  for (long long s = GROW_FIRST; s <= GROW_LAST; s *= 2) grow_alloc += s, grow_n++;
  long long pva = (PVA_SIZE + page - 1) / page * page;
  truth_line("path_a", SMALL_N * SMALL_SIZE, SMALL_N, SMALL_N * SMALL_SIZE, SMALL_N);
  truth_line("path_c", (long long)BIG_N * BIG_SIZE, BIG_N, (long long)(BIG_N - BIG_FREED) * BIG_SIZE,
             BIG_N - BIG_FREED);
  truth_line("path_freeall", TEMP_N * TEMP_SIZE, TEMP_N, 0, 0);
  truth_line("path_half", HALF_N * HALF_SIZE, HALF_N, HALF_N / 2 * HALF_SIZE, HALF_N / 2);
  truth_line("grow_buffer", grow_alloc, grow_n, GROW_LAST, 1);
  truth_line("use_calloc", CALLOC_N * CALLOC_NMEMB * CALLOC_SIZE, CALLOC_N,
             CALLOC_N * CALLOC_NMEMB * CALLOC_SIZE, CALLOC_N);
  truth_line("use_posix_memalign", PMA_N * PMA_SIZE, PMA_N, PMA_N * PMA_SIZE, PMA_N);
  truth_line("use_aligned_alloc", AA_N * AA_SIZE, AA_N, AA_N * AA_SIZE, AA_N);
  truth_line("use_memalign", MA_N * MA_SIZE, MA_N, MA_N * MA_SIZE, MA_N);
  truth_line("use_valloc", VA_N * VA_SIZE, VA_N, VA_N * VA_SIZE, VA_N);
  truth_line("use_pvalloc", PVA_N * pva, PVA_N, PVA_N * pva, PVA_N);
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    print_truth();
    return 0;
  }
  path_a();
  path_b();
  path_freeall();
  path_half();
  grow_buffer();
  use_calloc();
  use_posix_memalign();
  use_aligned_alloc();
  use_memalign();
  use_valloc();
  use_pvalloc();
  truth_sink = kept;
  return 0;
}
