/* manystacks: more distinct call paths than the client's first stack table
 * holds (2^14 ids, client/stacks.h), so that most of them go to its big
 * table (2 MiB aligned, in huge pages where the kernel gives them).
 *
 * Usage: manystacks
 * Path i (0 <= i < PATHS) is main > walk(i) > 15 calls of go_left or go_right,
 * one per bit of i from the lowest, > leaf_alloc, which mallocs 32 bytes and
 * keeps them. Every path is a stack of its own.
 * Ground truth (views at exit; nothing is freed):
 *   path                  alloc_space    alloc_objects  space          objects
 *   ... > leaf_alloc      PATHS*32       PATHS          PATHS*32       PATHS
 * with PATHS = 20000 distinct callsites ending in leaf_alloc.
 */
#include <stdlib.h>

#include "truth.h"

#define PATHS 20000
#define LEVELS 15
#define SIZE 32

static __attribute__((noinline)) void leaf_alloc(void) {
  truth_sink = malloc(SIZE);
}

static void go_right(int i, int level);

static __attribute__((noinline)) void go_left(int i, int level) {
  if (level == LEVELS) {
    leaf_alloc();
    return;
  }
  if ((i >> level) & 1)
    go_right(i, level + 1);
  else
    go_left(i, level + 1);
}

static __attribute__((noinline)) void go_right(int i, int level) {
  if (level == LEVELS) {
    leaf_alloc();
    return;
  }
  if ((i >> level) & 1)
    go_right(i, level + 1);
  else
    go_left(i, level + 1);
}

static __attribute__((noinline)) void walk(int i) {
  if (i & 1)
    go_right(i, 1);
  else
    go_left(i, 1);
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("leaf_alloc", (long long)PATHS * SIZE, PATHS, (long long)PATHS * SIZE, PATHS);
    return 0;
  }
  for (int i = 0; i < PATHS; i++)
    walk(i);
  return 0;
}
