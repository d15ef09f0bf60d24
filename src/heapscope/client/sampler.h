/*
 * sampler.h: which allocations to sample, and how many bytes each stands for.
 *
 * Poisson sampling per byte, as heapprofd does. Think of every allocated byte
 * as a coin toss that comes up "sample" with probability 1/I (I = the mean
 * interval). The distance between two sampled bytes is then geometric with
 * mean I; we draw it from the exponential distribution, which is much cheaper:
 *
 *   next interval = floor(Exp(mean I)) + 1 bytes,  Exp drawn as -log(U) * I
 *
 * with U uniform in (0, 1]. The "+1" makes the interval include the sampled
 * byte itself. For one allocation of `size` bytes:
 *
 *   size >= I : returned as is (recorded exactly); the countdown is untouched
 *   otherwise : countdown -= size; each time it reaches <= 0 a new interval is
 *               added and the sample grows by I. k crossings -> I * k bytes.
 *               0 means "not sampled".
 *
 * The estimate is unbiased: a callsite that allocates B bytes in many small
 * pieces gets about B bytes with a standard deviation of about sqrt(I * B).
 * I = 1 records every allocation of size >= 1 exactly (size 0 is never
 * sampled: a zero-byte allocation holds nothing).
 *
 * Pure code: no I/O, no globals. The client keeps one struct per thread in
 * initial-exec TLS, so threads never contend; each thread is seeded with the
 * configured seed mixed with its index, so a single-threaded run is
 * deterministic for a fixed seed. NB: one struct must not be shared between
 * threads.
 */
#ifndef HEAPSCOPE_CLIENT_SAMPLER_H
#define HEAPSCOPE_CLIENT_SAMPLER_H

#include <stdint.h>

struct hs_sampler {
  int64_t countdown;  /* bytes until the next sampled byte */
  uint64_t interval;  /* 0 = not initialized yet: every call misses the fast path */
  uint64_t rng;       /* xorshift64* state, never 0 */
};

/* Largest interval accepted; keeps every countdown within int64_t. */
#define HS_SAMPLER_MAX_INTERVAL (UINT64_C(1) << 40)

/* (Re)seeds s. interval is clamped to [1, HS_SAMPLER_MAX_INTERVAL]. */
void hs_sampler_init(struct hs_sampler *s, uint64_t interval, uint64_t seed)
    __attribute__((visibility("hidden")));

/* The sampler step described above. s must be initialized. */
uint64_t hs_sampler_sample(struct hs_sampler *s, uint64_t size)
    __attribute__((visibility("hidden")));

/* -ln(x * 2^-53) for x in [1, 2^53]: the exponential variate of the
 * sampler, without libm's log (a call into another library, whose code is
 * two instruction-cache misses away from ours on every sample).
 * x = 2^k * m with m in [sqrt(1/2), sqrt(2)) (k and m taken from the bits
 * of (double)x, which is exact), then ln(m) = 2 atanh(s) with s = (m - 1) /
 * (m + 1), |s| < 0.1716, by its series up to s^11 / 11: the first term
 * left out, 2 s^13 / 13, is below 2e-11. The result is within 2e-11 of
 * -log(x * 2^-53) (sampler_test.c checks it against libm over the range),
 * so the interval drawn from it, floor(e * I) + 1, is libm's or one byte
 * off, the latter in a share of about I * 2e-11 of the draws (1 in 10^7
 * at I = 4096), and never off by more while I < 5e10: a bias far below
 * anything the tests' bounds (4 standard deviations) could see. */
static inline double hs_sampler_neg_log(uint64_t x) {
  union {
    double d;
    uint64_t u;
  } v = {.d = (double)(int64_t)x}; /* x < 2^63: one signed conversion */
  /* Shift the exponent so that mantissas from sqrt(1/2) up count in the
   * next binade, then put the mantissa back around 1. */
  uint64_t ix = v.u + (UINT64_C(0x3ff0000000000000) - UINT64_C(0x3fe6a09e667f3bcd));
  int64_t k = (int64_t)(ix >> 52) - 1023;
  v.u = (ix & UINT64_C(0x000fffffffffffff)) + UINT64_C(0x3fe6a09e667f3bcd);
  double s = (v.d - 1.0) / (v.d + 1.0), z = s * s;
  double p = s * (2.0 + z * (2.0 / 3 + z * (2.0 / 5 + z * (2.0 / 7 + z * (2.0 / 9 + z * (2.0 / 11))))));
  return (double)(53 - k) * 0.693147180559945309417232121458176568 - p;
}

/* Mixes a seed with a thread index into a well spread 64-bit value. */
uint64_t hs_sampler_mix_seed(uint64_t seed, uint64_t thread_index)
    __attribute__((visibility("hidden")));

/* The common case inlined into the malloc hook: a small allocation that
 * does not reach the countdown. Returns 1 (and consumes the bytes) when the
 * allocation is certainly not sampled; 0 when hs_sampler_sample() must
 * decide (which also covers an uninitialized sampler: interval 0). */
static inline int hs_sampler_skip(struct hs_sampler *s, uint64_t size) {
  if (size < s->interval && (int64_t)size < s->countdown) {
    s->countdown -= (int64_t)size;
    return 1;
  }
  return 0;
}

#endif
