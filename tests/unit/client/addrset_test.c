/* Unit test driver for client/addrset.c (the set of sampled addresses and
 * the filter in front of it), built and run by test_addrset.py. Prints one
 * line per failed check and exits non-zero on any failure. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "addrset.h"
#include "check.h"

/* A plausible heap address: 16-aligned, in the lower 47 bits, never 0. */
static uint64_t addr(void) {
  return ((rnd() & ((UINT64_C(1) << 46) - 1)) | (UINT64_C(1) << 40)) & ~UINT64_C(15);
}

static int filter_empty(void) {
  for (uint64_t i = 0; i < HS_ADDR_BUCKETS / 64; i++)
    if (hs_addr_filter[i])
      return 0;
  return 1;
}

#define N 100000
static uint64_t addrs[N];

static void insert_remove_exact(void) {
  for (int i = 0; i < N; i++) {
    addrs[i] = addr();
    CHECK(hs_addrset_insert((void *)addrs[i]) == HS_OK, "insert %d", i);
  }
  int missing = 0;
  for (int i = 0; i < N; i++)
    missing += !hs_addr_maybe_sampled((void *)addrs[i]) || !hs_addrset_contains((void *)addrs[i]);
  CHECK(missing == 0, "%d inserted addresses not found", missing);
  /* Remove every other one: the rest must all still pass the filter. */
  for (int i = 0; i < N; i += 2)
    CHECK(hs_addrset_remove((void *)addrs[i]) == 1, "remove %d", i);
  missing = 0;
  int present = 0;
  for (int i = 0; i < N; i++) {
    if (i % 2)
      missing += !hs_addr_maybe_sampled((void *)addrs[i]) || !hs_addrset_contains((void *)addrs[i]);
    else
      present += hs_addrset_contains((void *)addrs[i]);
  }
  CHECK(missing == 0, "%d live addresses fail the filter or the set after removes", missing);
  CHECK(present == 0, "%d removed addresses still in the set", present);
  /* A false positive rate near n / 2^20 for n = N / 2 live (expected ~4.7%). */
  int fp = 0, trials = 1000000;
  for (int i = 0; i < trials; i++)
    fp += hs_addr_maybe_sampled((void *)addr());
  printf("false positives with %d live: %.4f (1 - exp(-n/2^20) = 0.0466)\n", N / 2,
         (double)fp / trials);
  CHECK(fp < trials / 10, "false positive rate %.4f", (double)fp / trials);
  for (int i = 1; i < N; i += 2)
    CHECK(hs_addrset_remove((void *)addrs[i]) == 1, "remove %d", i);
  CHECK(filter_empty(), "the filter is not empty once the set is");
}

/* Several addresses of one bucket: its bit stays until the last one goes. */
static void one_bucket(void) {
  uint64_t same[5];
  int n = 0;
  uint64_t b = hs_addr_bucket(addr());
  while (n < 5) {
    uint64_t a = addr();
    if (hs_addr_bucket(a) == b)
      same[n++] = a;
  }
  for (int i = 0; i < 5; i++)
    CHECK(hs_addrset_insert((void *)same[i]) == HS_OK, "insert");
  CHECK(hs_addrset_insert((void *)same[0]) == HS_OK, "second insert of one address");
  for (int i = 4; i >= 1; i--) {
    CHECK(hs_addrset_remove((void *)same[i]) == 1, "remove");
    CHECK(hs_addr_maybe_sampled((void *)same[0]), "bit cleared while %d left", i);
  }
  CHECK(hs_addrset_remove((void *)same[0]) == 1, "remove last");
  CHECK(!hs_addr_maybe_sampled((void *)same[0]), "bit kept after the last one went");
  CHECK(hs_addrset_remove((void *)same[0]) == 0, "a double free is not found");
  CHECK(filter_empty(), "the filter is not empty");
}

/* Threads insert and remove their own addresses, all in one shard (so they
 * share filter words and the shard's table), and check without a lock that
 * every address they hold is seen: a lost update of a filter word or a
 * count would show as a false negative. */
#define THREADS 4
#define PER_THREAD 64
#define ROUNDS 20000

struct worker {
  pthread_t tid;
  uint64_t mine[PER_THREAD];
  int errors;
};

static void *churn(void *arg) {
  struct worker *w = arg;
  int live[PER_THREAD] = {0};
  uint64_t x = (uint64_t)(uintptr_t)w | 1;
  for (int r = 0; r < ROUNDS; r++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int i = (int)(x % PER_THREAD);
    void *p = (void *)w->mine[i];
    if (live[i]) {
      if (hs_addrset_remove(p) != 1)
        w->errors++;
      live[i] = 0;
    } else {
      if (hs_addrset_insert(p) != HS_OK)
        w->errors++;
      live[i] = 1;
    }
    for (int k = 0; k < PER_THREAD; k++)
      if (live[k] && (!hs_addr_maybe_sampled((void *)w->mine[k]) ||
                      !hs_addrset_contains((void *)w->mine[k])))
        w->errors++;
  }
  for (int k = 0; k < PER_THREAD; k++)
    if (live[k] && hs_addrset_remove((void *)w->mine[k]) != 1)
      w->errors++;
  return NULL;
}

static void threads_one_shard(void) {
  static struct worker w[THREADS];
  uint64_t shard = HS_ADDR_SHARD(hs_addr_bucket(addr()));
  for (int t = 0; t < THREADS; t++) {
    int n = 0;
    while (n < PER_THREAD) {
      uint64_t a = addr();
      if (HS_ADDR_SHARD(hs_addr_bucket(a)) == shard)
        w[t].mine[n++] = a;
    }
  }
  for (int t = 0; t < THREADS; t++)
    pthread_create(&w[t].tid, NULL, churn, &w[t]);
  for (int t = 0; t < THREADS; t++) {
    pthread_join(w[t].tid, NULL);
    CHECK(w[t].errors == 0, "thread %d: %d addresses it held were not found", t, w[t].errors);
  }
  CHECK(filter_empty(), "the filter is not empty after the threads");
}

int main(void) {
  insert_remove_exact();
  one_bucket();
  threads_one_shard();
  return check_status();
}
