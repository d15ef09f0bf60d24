/* clock_cost: what one reading of the records' clock costs, against the coarse clock.
 *
 *     cc -O2 -o /tmp/clock_cost benchmarks/clock_cost.c && /tmp/clock_cost
 *
 * The client stamps each sampled malloc and each free it sends (wire.h: MALLOC, FREE) with
 * the CPU's time-stamp counter where the producer finds it usable (producer/tsc.py), else with
 * CLOCK_MONOTONIC, read in the vDSO; CLOCK_MONOTONIC_COARSE was the records' clock before
 * lifetimes (~4 ms ticks, too coarse for a 1 ms threshold). Prints the best ns per call of
 * 2000 batches of 10,000 calls each: the best batch is the one the machine's load left alone.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static uint64_t now_ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(void) {
  volatile uint64_t sink = 0;
  const clockid_t clocks[2] = {CLOCK_MONOTONIC_COARSE, CLOCK_MONOTONIC};
  const char *names[2] = {"CLOCK_MONOTONIC_COARSE", "CLOCK_MONOTONIC"};
  for (int k = 0; k < 2; k++) {
    double best = 1e9;
    for (int b = 0; b < 2000; b++) {
      uint64_t t0 = now_ns(CLOCK_MONOTONIC);
      for (int i = 0; i < 10000; i++) sink += now_ns(clocks[k]);
      double per = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 10000;
      if (per < best) best = per;
    }
    printf("%-24s %.1f ns a call\n", names[k], best);
  }
#if defined(__x86_64__)
  double best = 1e9;
  for (int b = 0; b < 2000; b++) {
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < 10000; i++) sink += __builtin_ia32_rdtsc();
    double per = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 10000;
    if (per < best) best = per;
  }
  printf("%-24s %.1f ns a call\n", "rdtsc", best);
#endif
  return 0;
}
