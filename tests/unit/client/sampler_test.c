/* Unit test driver for client/sampler.c, built and run by test_sampler.py.
 * Prints one line per failed check and exits non-zero on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "sampler.h"
#include "check.h"

static void interval_one_is_exact(void) {
  struct hs_sampler s;
  hs_sampler_init(&s, 1, 42);
  for (uint64_t size = 1; size < 5000; size++)
    CHECK(hs_sampler_sample(&s, size) == size, "interval 1, size %llu", (unsigned long long)size);
  for (int i = 0; i < 1000; i++)
    CHECK(hs_sampler_sample(&s, 0) == 0, "interval 1, size 0 sampled");
  /* The inline fast path never claims a size >= 1 at interval 1. */
  CHECK(!hs_sampler_skip(&s, 1), "fast path skipped a size-1 allocation at interval 1");
}

static void large_allocations_are_exact(void) {
  struct hs_sampler s;
  hs_sampler_init(&s, 4096, 7);
  int64_t before = s.countdown;
  for (uint64_t size = 4096; size < 4096 * 64; size += 999) {
    CHECK(hs_sampler_sample(&s, size) == size, "large size %llu", (unsigned long long)size);
    CHECK(!hs_sampler_skip(&s, size), "fast path skipped a large allocation");
  }
  CHECK(s.countdown == before, "large allocations moved the countdown");
}

static void deterministic_for_a_seed(void) {
  struct hs_sampler a, b, c;
  hs_sampler_init(&a, 512, 1234);
  hs_sampler_init(&b, 512, 1234);
  hs_sampler_init(&c, 512, hs_sampler_mix_seed(1234, 1));
  int differ = 0;
  for (int i = 0; i < 100000; i++) {
    uint64_t size = 1 + i % 300;
    uint64_t x = hs_sampler_sample(&a, size), y = hs_sampler_sample(&b, size);
    CHECK(x == y, "same seed, different samples at %d", i);
    differ |= hs_sampler_sample(&c, size) != x;
    CHECK(x % 512 == 0, "small sample not a multiple of the interval");
  }
  CHECK(differ, "another thread index gave the same stream");
}

static void fast_path_agrees_with_slow_path(void) {
  struct hs_sampler a, b;
  hs_sampler_init(&a, 1000, 99);
  hs_sampler_init(&b, 1000, 99);
  for (int i = 0; i < 200000; i++) {
    uint64_t size = rnd() % 1500;
    uint64_t x = hs_sampler_skip(&a, size) ? 0 : hs_sampler_sample(&a, size);
    uint64_t y = hs_sampler_sample(&b, size);
    CHECK(x == y, "fast path changed the outcome at %d", i);
  }
}

/* The estimate of many small allocations is within 4 standard deviations
 * (sqrt(I * B)) of the truth, for a fixed seed. */
static void unbiased_estimate(uint64_t interval, uint64_t max_size) {
  struct hs_sampler s;
  hs_sampler_init(&s, interval, hs_sampler_mix_seed(2024, 0));
  double truth = 0, estimate = 0;
  for (int i = 0; i < 1000000; i++) {
    uint64_t size = 1 + rnd() % max_size;
    truth += (double)size;
    estimate += (double)hs_sampler_sample(&s, size);
  }
  double sd = sqrt((double)interval * truth);
  printf("interval %llu: truth %.0f estimate %.0f (%.2f sd)\n", (unsigned long long)interval,
         truth, estimate, (estimate - truth) / sd);
  CHECK(fabs(estimate - truth) <= 4 * sd, "estimate %.0f vs truth %.0f, sd %.0f", estimate,
        truth, sd);
}

/* The exponential variate (hs_sampler_neg_log, in place of libm's log)
 * against libm: within 3e-11 everywhere, over random 53-bit inputs, short
 * ones (U near 0, the long intervals), every power of two and the ends. */
static void neg_log_matches_libm(void) {
  double worst = 0;
  uint64_t at = 0;
  for (int i = 0; i < 2000000; i++) {
    uint64_t r = rnd();
    uint64_t x = (r >> 11) + 1;
    if (i & 1)
      x = (x >> (r % 53)) | 1;
    double d = fabs(hs_sampler_neg_log(x) - -log((double)x * 0x1p-53));
    if (d > worst) {
      worst = d;
      at = x;
    }
  }
  for (int k = 0; k <= 53; k++) {
    for (int64_t dx = -1; dx <= 1; dx++) {
      uint64_t x = (UINT64_C(1) << k) + (uint64_t)dx;
      if (x < 1 || x > (UINT64_C(1) << 53))
        continue;
      double d = fabs(hs_sampler_neg_log(x) - -log((double)x * 0x1p-53));
      if (d > worst) {
        worst = d;
        at = x;
      }
    }
  }
  printf("neg_log: worst difference from libm %.3g at %llu\n", worst, (unsigned long long)at);
  CHECK(worst < 3e-11, "neg_log differs from libm by %.3g at %llu", worst, (unsigned long long)at);
  CHECK(hs_sampler_neg_log(UINT64_C(1) << 53) == 0, "neg_log(U = 1) is not 0");
  CHECK(hs_sampler_neg_log(1) > 36.7 && hs_sampler_neg_log(1) < 36.8, "neg_log of the least U");
}

/* Its distribution: Exp(1), by the mean and the tail shares at a few
 * points, each within 4 standard deviations. */
static void neg_log_is_exponential(void) {
  const int n = 1000000;
  static const double at[] = {0.01, 0.1, 0.5, 1, 2, 4, 8};
  int above[sizeof at / sizeof at[0]] = {0};
  double sum = 0;
  for (int i = 0; i < n; i++) {
    double e = hs_sampler_neg_log((rnd() >> 11) + 1);
    sum += e;
    for (size_t j = 0; j < sizeof at / sizeof at[0]; j++)
      above[j] += e > at[j];
  }
  CHECK(fabs(sum / n - 1) <= 4 / sqrt(n), "mean %.5f", sum / n);
  for (size_t j = 0; j < sizeof at / sizeof at[0]; j++) {
    double p = exp(-at[j]), share = (double)above[j] / n;
    CHECK(fabs(share - p) <= 4 * sqrt(p * (1 - p) / n), "P(E > %g) = %.5f, not %.5f", at[j],
          share, p);
  }
}

int main(void) {
  neg_log_matches_libm();
  neg_log_is_exponential();
  interval_one_is_exact();
  large_allocations_are_exact();
  deterministic_for_a_seed();
  fast_path_agrees_with_slow_path();
  unbiased_estimate(4096, 512);
  unbiased_estimate(4096, 8000); /* mixes exact (>= I) and sampled sizes */
  unbiased_estimate(64, 100);
  unbiased_estimate(32768, 4096);
  return check_status();
}
