/* sampler.c: see sampler.h for the math. */
#include "sampler.h"

static uint64_t splitmix64(uint64_t x) {
  x += UINT64_C(0x9e3779b97f4a7c15);
  x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

uint64_t hs_sampler_mix_seed(uint64_t seed, uint64_t thread_index) {
  return splitmix64(seed ^ splitmix64(thread_index + 1));
}

static uint64_t next_u64(struct hs_sampler *s) {
  /* xorshift64*: period 2^64 - 1, good enough for a sampling decision. */
  uint64_t x = s->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  s->rng = x;
  return x * UINT64_C(0x2545f4914f6cdd1d);
}

/* floor(Exp(mean interval)) + 1, always >= 1. The interval (<= 2^40) is
 * converted as a signed value: one instruction where an unsigned
 * conversion takes a branch and five. Not inlined: most calls of the
 * sample step (allocations of at least the interval, in git log -p) draw
 * nothing, and the draw's registers would cost each of them a frame. */
static __attribute__((noinline)) int64_t next_interval(struct hs_sampler *s) {
  /* U in (0, 1]: 53 random bits, plus one so that log(U) is finite. */
  double e = hs_sampler_neg_log((next_u64(s) >> 11) + 1) * (double)(int64_t)s->interval;
  return (int64_t)e + 1; /* e <= ~36.7 * interval */
}

void hs_sampler_init(struct hs_sampler *s, uint64_t interval, uint64_t seed) {
  if (interval < 1)
    interval = 1;
  if (interval > HS_SAMPLER_MAX_INTERVAL)
    interval = HS_SAMPLER_MAX_INTERVAL;
  s->interval = interval;
  s->rng = splitmix64(seed);
  if (s->rng == 0)
    s->rng = 1;
  s->countdown = next_interval(s);
}

uint64_t hs_sampler_sample(struct hs_sampler *s, uint64_t size) {
  if (size >= s->interval)
    return size;
  /* size < interval <= 2^40, so this cannot overflow. */
  s->countdown -= (int64_t)size;
  uint64_t k = 0;
  while (s->countdown <= 0) {
    s->countdown += next_interval(s);
    k++;
  }
  return s->interval * k;
}
