/* sharedwrap: two callers of xmalloc below the same five frames, as a compiler's or a
 * server's passes are: only the caller tells their stacks apart.
 *
 * Usage: sharedwrap
 *   main > run > pass_one > pass_two > pass_three > pass_four > {read_symbols, read_strings}
 *   read_symbols allocates 200 x 1000 B and read_strings 100 x 1000 B, both through xmalloc
 *   (the wrapper folded), nothing freed: the peak is the end.
 *
 * Ground truth at interval 1 (every view at exit, as truth.h defines them):
 *   path                                                     alloc_space  alloc_objects  space  objects
 *   main > run > pass_one > ... > read_symbols > xmalloc          200000            200  200000     200
 *   main > run > pass_one > ... > read_strings > xmalloc          100000            100  100000     100
 */
#include <stdlib.h>

#include "truth.h"

#define SYMBOLS_N 200
#define STRINGS_N 100
#define SIZE 1000

static void *keep[SYMBOLS_N + STRINGS_N];
static int kept;

__attribute__((noinline)) void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) abort();
  return p;
}

__attribute__((noinline)) static void read_symbols(void) {
  for (int i = 0; i < SYMBOLS_N; i++) keep[kept++] = xmalloc(SIZE);
}

__attribute__((noinline)) static void read_strings(void) {
  for (int i = 0; i < STRINGS_N; i++) keep[kept++] = xmalloc(SIZE);
}

__attribute__((noinline)) static void pass_four(void) {
  read_symbols();
  read_strings();
}

__attribute__((noinline)) static void pass_three(void) { pass_four(); }
__attribute__((noinline)) static void pass_two(void) { pass_three(); }
__attribute__((noinline)) static void pass_one(void) { pass_two(); }
__attribute__((noinline)) static void run(void) { pass_one(); }

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("read_symbols", SYMBOLS_N * SIZE, SYMBOLS_N, SYMBOLS_N * SIZE, SYMBOLS_N);
    truth_line("read_strings", STRINGS_N * SIZE, STRINGS_N, STRINGS_N * SIZE, STRINGS_N);
    return 0;
  }
  run();
  truth_sink = keep[0];
  return 0;
}
