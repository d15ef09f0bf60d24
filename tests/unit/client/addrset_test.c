/* Unit test driver for client/addrset.c (the set of sampled addresses and
 * the filter in front of it), built and run by test_addrset.py. Prints one
 * line per failed check and exits non-zero on any failure. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "addrset.h"
#include "check.h"

/* A plausible heap address: 16-aligned, in the lower 47 bits, never 0. */
static uint64_t addr(void) {
  return ((rnd() & ((UINT64_C(1) << 46) - 1)) | (UINT64_C(1) << 40)) & ~UINT64_C(15);
}

static int maybe(uint64_t a) {
  return hs_addr_maybe_sampled((const void *)(uintptr_t)a);
}

static int contains(uint64_t a) {
  return hs_addrset_contains((const void *)(uintptr_t)a);
}

static int insert(uint64_t a) {
  return hs_addrset_insert((const void *)(uintptr_t)a);
}

static int remove_(uint64_t a) {
  return hs_addrset_remove((const void *)(uintptr_t)a);
}

/* Set bits of the filter outside the pinned buckets [pin, pin + npin). */
static uint64_t pin_lo, pin_n;
static uint64_t stray_bits(void) {
  uint64_t n = 0;
  for (uint64_t w = 0; w < HS_ADDR_WORDS; w++) {
    uint64_t bits = hs_addr_filter[w];
    while (bits) {
      uint64_t b = w * 64 + (uint64_t)__builtin_ctzll(bits);
      if (((b - pin_lo) & (HS_ADDR_BUCKETS - 1)) >= pin_n)
        n++;
      bits &= bits - 1;
    }
  }
  return n;
}

#define N 100000
static uint64_t addrs[N];

static void insert_remove_exact(void) {
  for (int i = 0; i < N; i++) {
    addrs[i] = addr();
    CHECK(insert(addrs[i]) == HS_OK, "insert %d", i);
  }
  int missing = 0;
  for (int i = 0; i < N; i++)
    missing += !maybe(addrs[i]) || !contains(addrs[i]);
  CHECK(missing == 0, "%d inserted addresses not found", missing);
  /* Remove every other one: the rest must all still pass the filter. */
  for (int i = 0; i < N; i += 2)
    CHECK(remove_(addrs[i]) == 1, "remove %d", i);
  missing = 0;
  int present = 0;
  for (int i = 0; i < N; i++) {
    if (i % 2)
      missing += !maybe(addrs[i]) || !contains(addrs[i]);
    else
      present += contains(addrs[i]);
  }
  CHECK(missing == 0, "%d live addresses fail the filter or the set after removes", missing);
  CHECK(present == 0, "%d removed addresses still in the set", present);
  /* Addresses spread over 2^46 bytes alias all over the span: a false
   * positive rate near n / 2^25 for n = N / 2 live (expected ~0.15%). */
  int fp = 0, trials = 1000000;
  for (int i = 0; i < trials; i++)
    fp += maybe(addr());
  printf("false positives with %d live, spread: %.4f (n / 2^25 = %.4f)\n", N / 2, (double)fp / trials,
         (double)(N / 2) / (double)HS_ADDR_BUCKETS);
  CHECK(fp < trials / 100, "false positive rate %.4f", (double)fp / trials);
  for (int i = 1; i < N; i += 2)
    CHECK(remove_(addrs[i]) == 1, "remove %d", i);
  CHECK(stray_bits() == 0, "the filter is not empty once the set is");
}

/* A heap inside one span: 1 in 64 granules of 64 MiB sampled. The filter
 * is exact there: no other granule of the region passes it. */
static void exact_inside_span(void) {
  uint64_t base = UINT64_C(0x555500000000), bytes = UINT64_C(64) << 20;
  uint64_t n = 0;
  for (uint64_t off = 0; off < bytes; off += 64 * 16) {
    uint64_t a = base + off + 16 * (rnd() % 64);
    CHECK(insert(a) == HS_OK, "insert");
    addrs[n++ % N] = a;
  }
  uint64_t fp = 0, hits = 0;
  for (uint64_t off = 0; off < bytes; off += 16) {
    uint64_t a = base + off;
    if (contains(a))
      hits++;
    else
      fp += (uint64_t)maybe(a);
  }
  CHECK(hits == n, "%llu of %llu sampled granules found", (unsigned long long)hits, (unsigned long long)n);
  CHECK(fp == 0, "%llu unsampled granules of the span pass the filter", (unsigned long long)fp);
  for (uint64_t off = 0; off < bytes; off += 16)
    if (contains(base + off))
      CHECK(remove_(base + off) == 1, "remove");
  CHECK(stray_bits() == 0, "the filter is not empty");
}

/* Keys of one bucket: aliases one span apart, the heap keys of one address
 * (addr ^ heap << 56, record.h and heaps.c) and objects of a custom heap
 * inside one granule. The bit stays until the last one goes, removed in any
 * order; a neighbour granule in the same word keeps its own bit. */
#define ALIASES 12
static void one_bucket(void) {
  for (int round = 0; round < 20; round++) {
    uint64_t a = addr();
    uint64_t same[ALIASES];
    for (int i = 0; i < 4; i++)
      same[i] = a + (uint64_t)i * HS_ADDR_SPAN;
    for (int i = 4; i < 8; i++)
      same[i] = a ^ ((uint64_t)(i - 2) << 56);
    for (int i = 8; i < ALIASES; i++)
      same[i] = (a + UINT64_C(1) * HS_ADDR_SPAN * 7) + (uint64_t)(i - 7) * 2; /* 8-byte objects */
    uint64_t b = hs_addr_bucket(a);
    for (int i = 0; i < ALIASES; i++)
      CHECK(hs_addr_bucket(same[i]) == b, "key %d is not in the bucket", i);
    uint64_t neighbour = (a & 1023) == 1008 ? a - 16 : a + 16; /* same filter word */
    CHECK(insert(neighbour) == HS_OK, "insert");
    for (int i = 0; i < ALIASES; i++)
      CHECK(insert(same[i]) == HS_OK, "insert");
    CHECK(insert(same[0]) == HS_OK, "second insert of one address");
    /* Remove in a random order. */
    for (int i = ALIASES - 1; i > 0; i--) {
      int j = (int)(rnd() % (uint64_t)(i + 1));
      uint64_t t = same[i];
      same[i] = same[j];
      same[j] = t;
    }
    for (int i = 0; i < ALIASES; i++) {
      CHECK(remove_(same[i]) == 1, "remove %d", i);
      CHECK(!contains(same[i]), "removed key still found");
      for (int k = i + 1; k < ALIASES; k++)
        CHECK(contains(same[k]), "key %d lost after %d removes", k, i + 1);
      if (i + 1 < ALIASES)
        CHECK(maybe(a), "bit cleared while %d left", ALIASES - i - 1);
    }
    CHECK(!maybe(a), "bit kept after the last one went");
    CHECK(maybe(neighbour) && contains(neighbour), "the neighbour granule lost its bit");
    CHECK(remove_(same[0]) == 0, "a double free is not found");
    CHECK(remove_(neighbour) == 1, "remove the neighbour");
    CHECK(!maybe(neighbour), "neighbour bit kept");
  }
  CHECK(stray_bits() == 0, "the filter is not empty");
}

/* Many keys in one bucket (long probe runs, table growth among them). */
#define CROWD 3000
static void crowded_bucket(void) {
  static uint64_t crowd[CROWD];
  uint64_t a = addr();
  for (int i = 0; i < CROWD; i++) {
    crowd[i] = a + (uint64_t)i * HS_ADDR_SPAN;
    CHECK(insert(crowd[i]) == HS_OK, "insert");
  }
  /* Other keys of the same shard around it. */
  for (int i = 0; i < 2000; i++) {
    uint64_t o = addr();
    if (HS_ADDR_SHARD(hs_addr_bucket(o)) == HS_ADDR_SHARD(hs_addr_bucket(a)) &&
        hs_addr_bucket(o) != hs_addr_bucket(a) && insert(o) == HS_OK)
      addrs[i] = o;
    else
      addrs[i] = 0;
  }
  for (int i = CROWD - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint64_t)(i + 1));
    uint64_t t = crowd[i];
    crowd[i] = crowd[j];
    crowd[j] = t;
  }
  int lost = 0;
  for (int i = 0; i < CROWD; i++) {
    CHECK(remove_(crowd[i]) == 1, "remove %d", i);
    if (i + 1 < CROWD && !maybe(a))
      lost++;
    if (i % 100 == 0)
      for (int k = i + 1; k < CROWD; k++)
        lost += !contains(crowd[k]);
  }
  CHECK(lost == 0, "%d keys of the crowded bucket lost", lost);
  CHECK(!maybe(a), "crowded bit kept");
  for (int i = 0; i < 2000; i++)
    if (addrs[i])
      CHECK(contains(addrs[i]) && remove_(addrs[i]) == 1, "a neighbour key of the shard lost");
  CHECK(stray_bits() == 0, "the filter is not empty");
}

/* Threads insert and remove their own addresses, all in ONE filter word (so
 * they share the word, its shard's lock and table), and check without a lock
 * that every address they hold is seen: a lost update of the word would
 * show as a false negative. */
#define THREADS 4
#define PER_THREAD 16 /* 4 x 16 = the 64 granules of the word */
#define ROUNDS 40000

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
    if (live[i]) {
      if (remove_(w->mine[i]) != 1)
        w->errors++;
      live[i] = 0;
    } else {
      if (insert(w->mine[i]) != HS_OK)
        w->errors++;
      live[i] = 1;
    }
    for (int k = 0; k < PER_THREAD; k++)
      if (live[k] && (!maybe(w->mine[k]) || !contains(w->mine[k])))
        w->errors++;
  }
  for (int k = 0; k < PER_THREAD; k++)
    if (live[k] && remove_(w->mine[k]) != 1)
      w->errors++;
  return NULL;
}

static void threads_one_word(void) {
  static struct worker w[THREADS];
  uint64_t base = addr() & ~UINT64_C(1023);
  for (int t = 0; t < THREADS; t++)
    for (int n = 0; n < PER_THREAD; n++) /* interleaved: neighbouring bits of different threads */
      w[t].mine[n] = base + 16 * (uint64_t)(n * THREADS + t);
  for (int t = 0; t < THREADS; t++)
    pthread_create(&w[t].tid, NULL, churn, &w[t]);
  for (int t = 0; t < THREADS; t++) {
    pthread_join(w[t].tid, NULL);
    CHECK(w[t].errors == 0, "thread %d: %d addresses it held were not found", t, w[t].errors);
  }
  CHECK(hs_addr_filter[(base >> 10) & (HS_ADDR_WORDS - 1)] == 0, "the shared word is not empty");
  CHECK(stray_bits() == 0, "the filter is not empty after the threads");
}

/* A pinned range (the bootstrap arena's, in the client) passes the filter
 * for good: an aliasing key's remove leaves it, a reset sets it again. */
static unsigned char arena[4096 + 40] __attribute__((aligned(16)));
static void pinned_range(void) {
  hs_addrset_pin(arena + 8, sizeof arena - 8);
  pin_lo = hs_addr_bucket((uint64_t)(uintptr_t)(arena + 8));
  pin_n = (sizeof arena + 15) / 16;
  int missing = 0;
  for (size_t i = 8; i < sizeof arena; i++)
    missing += !hs_addr_maybe_sampled(arena + i);
  CHECK(missing == 0, "%d bytes of the pinned range fail the filter", missing);
  uint64_t inside = (uint64_t)(uintptr_t)(arena + 64);
  uint64_t alias = inside + HS_ADDR_SPAN;
  CHECK(insert(alias) == HS_OK && remove_(alias) == 1, "alias of a pinned granule");
  CHECK(maybe(inside), "a remove cleared a pinned bit");
  CHECK(!contains(inside), "a pinned address is not a key");
  CHECK(!maybe((uint64_t)(uintptr_t)arena + sizeof arena + 64), "the bit after the range is set");
  CHECK(stray_bits() == 0, "bits outside the pinned range");
}

/* Inserts 64 keys, forks, and checks in the child that the reset left none
 * of them (and no stray bit: `pinned`, the pinned range still answers),
 * that its own inserts and removes work, and in the parent that it keeps
 * its keys. */
static void fork_reset(int pinned, const char *what) {
  uint64_t keep[64];
  for (int i = 0; i < 64; i++) {
    keep[i] = addr();
    CHECK(insert(keep[i]) == HS_OK, "insert");
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    hs_addrset_reset();
    int bad = 0;
    for (int i = 0; i < 64; i++)
      bad += maybe(keep[i]) || contains(keep[i]);
    bad += stray_bits() != 0;
    bad += pinned && !hs_addr_maybe_sampled(arena + 64);
    for (int i = 0; i < 64; i++)
      bad += insert(keep[i]) != HS_OK || !maybe(keep[i]) || !contains(keep[i]);
    for (int i = 0; i < 64; i++)
      bad += remove_(keep[i]) != 1;
    bad += stray_bits() != 0;
    bad += pinned && !hs_addr_maybe_sampled(arena + 64);
    _exit(bad ? 1 : 0);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/wait");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s (status %d)", what, status);
  for (int i = 0; i < 64; i++)
    CHECK(maybe(keep[i]) && contains(keep[i]) && remove_(keep[i]) == 1, "parent lost a key");
  CHECK(stray_bits() == 0, "the filter is not empty");
}

/* A fork child resets the set: nothing of the parent's is left but the
 * pinned range, and the child's own inserts work; the parent keeps its own. */
static void reset_after_fork(void) { fork_reset(1, "the child's reset set is wrong"); }

/* A reset while the shards still hold their first tables (kept in static
 * storage, addrset.c): the child must find them empty, not keep the
 * parent's keys there, which would make an insert of the same key see it
 * "already there" and leave its filter bit clear. Runs first, before any
 * table has grown. */
static void reset_first_tables(void) { fork_reset(0, "the child's first tables kept keys"); }

int main(void) {
  reset_first_tables();
  insert_remove_exact();
  exact_inside_span();
  one_bucket();
  crowded_bucket();
  threads_one_word();
  pinned_range();
  reset_after_fork();
  return check_status();
}
