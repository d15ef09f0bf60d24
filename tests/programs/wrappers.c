/* wrappers: allocations that reach malloc through allocator wrappers, as real programs' do.
 *
 * Usage: wrappers
 *   parse_input allocates through xmalloc (gcc's and git's wrapper), build_index through
 *   xcalloc, name_copy through xstrdup (which calls xmalloc: two wrappers in a row), and
 *   pool_fill through pool_alloc, this program's own wrapper (what `--fold` adds). Nothing is
 *   freed, so the peak is the end.
 *
 * Ground truth at interval 1 (every view at exit, as truth.h defines them):
 *   path                                    alloc_space  alloc_objects  space   objects
 *   main > parse_input > xmalloc                  300000           300  300000      300
 *   main > build_index > xcalloc                  200000           100  200000      100
 *   main > name_copy > xstrdup > xmalloc            5000           500    5000      500
 *   main > pool_fill > pool_alloc > xmalloc        40000            10   40000       10
 * With the wrappers folded, parse_input, build_index, name_copy and pool_alloc hold those
 * bytes themselves (pool_fill with --fold pool_alloc).
 */
#include <stdlib.h>
#include <string.h>

#include "truth.h"

#define PARSE_N 300
#define PARSE_SIZE 1000
#define INDEX_N 100
#define INDEX_SIZE 2000
#define NAME_N 500
#define POOL_N 10
#define POOL_SIZE 4000

static void *keep[PARSE_N + INDEX_N + NAME_N + POOL_N];
static int kept;

__attribute__((noinline)) void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) abort();
  return p;
}

__attribute__((noinline)) void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) abort();
  return p;
}

__attribute__((noinline)) char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

__attribute__((noinline)) static void *pool_alloc(size_t n) { return xmalloc(n); }

__attribute__((noinline)) static void parse_input(void) {
  for (int i = 0; i < PARSE_N; i++) keep[kept++] = xmalloc(PARSE_SIZE);
}

__attribute__((noinline)) static void build_index(void) {
  for (int i = 0; i < INDEX_N; i++) keep[kept++] = xcalloc(INDEX_SIZE / 8, 8);
}

__attribute__((noinline)) static void name_copy(void) {
  for (int i = 0; i < NAME_N; i++) keep[kept++] = xstrdup("123456789"); /* 10 bytes each */
}

__attribute__((noinline)) static void pool_fill(void) {
  for (int i = 0; i < POOL_N; i++) keep[kept++] = pool_alloc(POOL_SIZE);
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("parse_input", (long long)PARSE_N * PARSE_SIZE, PARSE_N, (long long)PARSE_N * PARSE_SIZE, PARSE_N);
    truth_line("build_index", (long long)INDEX_N * INDEX_SIZE, INDEX_N, (long long)INDEX_N * INDEX_SIZE, INDEX_N);
    truth_line("name_copy", NAME_N * 10, NAME_N, NAME_N * 10, NAME_N);
    truth_line("pool_fill", (long long)POOL_N * POOL_SIZE, POOL_N, (long long)POOL_N * POOL_SIZE, POOL_N);
    return 0;
  }
  parse_input();
  build_index();
  name_copy();
  pool_fill();
  truth_sink = keep[0];
  return 0;
}
