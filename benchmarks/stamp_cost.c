/* stamp_cost: the client's cost of one sample and its sent free, for benchmarks/stamp_cost.py.
 *
 * Usage: stamp_cost BATCHES OPS
 *   BATCHES times: OPS pairs of malloc and free of 64-176 bytes, timed as one batch, then a
 *   1.5 ms pause, so that the producer drains the ring and no batch waits on it. Under
 *   `record -i 1` every malloc is a sample and every free is sent. Prints the fastest batch's
 *   ns per pair: the batch the machine's load left alone, steadier than any mean between runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile char sink;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Out of line, so each sample unwinds the same two frames of ours. */
static __attribute__((noinline)) void pair(size_t size) {
  char *p = malloc(size);
  if (p == NULL)
    abort();
  p[0] = 1;
  sink += p[0];
  free(p);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: stamp_cost BATCHES OPS\n");
    return 2;
  }
  long batches = atol(argv[1]), ops = atol(argv[2]);
  if (batches < 1 || ops < 1) {
    fprintf(stderr, "stamp_cost: BATCHES and OPS must be positive\n");
    return 2;
  }
  uint64_t best = UINT64_MAX;
  for (long b = 0; b < batches; b++) {
    uint64_t t0 = now_ns();
    for (long i = 0; i < ops; i++)
      pair(64 + (size_t)(i & 7) * 16);
    uint64_t dt = now_ns() - t0;
    if (dt < best)
      best = dt;
    usleep(1500);
  }
  printf("%.2f\n", (double)best / (double)ops);
  return 0;
}
