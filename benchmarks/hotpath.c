/* hotpath: the client's per-call paths in isolation, for benchmarks/hotpath.py
 * (instruction counts under callgrind, never wall time).
 *
 * Usage: hotpath OPS SIZE [LIVE LIVE_SIZE [DEPTH]]
 *   LIVE allocations of LIVE_SIZE bytes are made first and kept to the end
 *   (with LIVE_SIZE >= the sampling interval every one of them is sampled, so
 *   the client holds LIVE sampled addresses), then OPS times "free the block
 *   allocated RING operations ago, malloc(SIZE) in its place" from DEPTH
 *   frames down (default 8), so that the frees see many addresses; then
 *   everything is freed.
 * Prints a checksum so that nothing is optimized away.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static volatile size_t sink;

#define RING 1024

static __attribute__((noinline)) void churn(long ops, size_t size) {
  static char *ring[RING];
  for (long i = 0; i < ops; i++) {
    free(ring[i % RING]); /* free(NULL) for the first RING */
    char *p = malloc(size);
    if (p == NULL)
      abort();
    p[0] = (char)i;
    sink += (size_t)p[0];
    ring[i % RING] = p;
  }
  for (long i = 0; i < RING; i++)
    free(ring[i]);
}

/* A few real frames above the allocation, as in a program. */
static __attribute__((noinline)) void descend(int depth, long ops, size_t size) {
  if (depth <= 1) {
    churn(ops, size);
    return;
  }
  descend(depth - 1, ops, size);
  sink += (size_t)depth;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: hotpath OPS SIZE [LIVE LIVE_SIZE [DEPTH]]\n");
    return 2;
  }
  long ops = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  long live = argc > 3 ? atol(argv[3]) : 0;
  size_t live_size = argc > 4 ? (size_t)atol(argv[4]) : 0;
  int depth = argc > 5 ? atoi(argv[5]) : 8;
  void **kept = live > 0 ? calloc((size_t)live, sizeof *kept) : NULL;
  for (long i = 0; i < live; i++) {
    kept[i] = malloc(live_size);
    if (kept[i] == NULL)
      abort();
  }
  descend(depth, ops, size);
  for (long i = 0; i < live; i++)
    free(kept[i]);
  free(kept);
  printf("%zu\n", (size_t)sink);
  return 0;
}
