/* growth: memory that grows, shrinks and stays with an argument N (0..8),
 * for `heapscope diff` (two runs with different N) and `heapscope leaks`.
 *
 * Usage: growth N
 * Ground truth (views at exit; nothing kept is ever freed, so space = leaks):
 *   path                  alloc_space    alloc_objects  space          objects
 *   main > grow_cache     N*1000         N              N*1000         N
 *   main > steady         5000           10             5000           10
 *   main > shrink_pool    (8-N)*2000     8-N            (8-N)*2000     8-N
 *   main > temp_work      N*300          N              0              0
 * `growth --print-truth N` prints these lines and exits without allocating.
 */
#include <stdlib.h>

#include "truth.h"

static void *kept[64];
static int nkept;

static void grow_cache(int n) {
  for (int i = 0; i < n; i++) kept[nkept++] = malloc(1000);
}

static void steady(void) {
  for (int i = 0; i < 10; i++) kept[nkept++] = malloc(500);
}

static void shrink_pool(int n) {
  for (int i = 0; i < 8 - n; i++) kept[nkept++] = malloc(2000);
}

static void temp_work(int n) {
  for (int i = 0; i < n; i++) {
    void *p = malloc(300);
    truth_sink = p;
    free(p);
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[argc - 1]) : 0;
  if (n < 0 || n > 8) return 2;
  if (wants_truth(argc, argv)) {
    truth_line("grow_cache", n * 1000, n, n * 1000, n);
    truth_line("steady", 5000, 10, 5000, 10);
    truth_line("shrink_pool", (8 - n) * 2000, 8 - n, (8 - n) * 2000, 8 - n);
    truth_line("temp_work", n * 300, n, 0, 0);
    return 0;
  }
  grow_cache(n);
  steady();
  shrink_pool(n);
  temp_work(n);
  return 0;
}
