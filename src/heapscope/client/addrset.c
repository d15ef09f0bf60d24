/* addrset.c: writers of the sampled-address set (see addrset.h). */
#include "addrset.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#include "wire.h"

struct hs_addr_shard hs_addr_shards[HS_ADDRSET_SHARDS];
uint64_t hs_addr_filter[HS_ADDR_BUCKETS / 64] __attribute__((aligned(64)));

/* Addresses of the set per filter bucket, written under the bucket's shard
 * lock only (2 MiB of zero pages, touched where samples land). A count that
 * reaches COUNT_STUCK stays there and keeps its bit set for good: a
 * false positive forever, never a false negative. */
static uint16_t bucket_count[HS_ADDR_BUCKETS];
#define COUNT_STUCK UINT16_MAX

/* Only the owner shard writes a filter word (addrset.h), so plain relaxed
 * stores do; readers need no more than relaxed (see hs_addr_maybe_sampled). */
static void filter_added(uint64_t b) {
  uint16_t c = bucket_count[b];
  if (c == COUNT_STUCK)
    return;
  bucket_count[b] = (uint16_t)(c + 1);
  if (c == 0) {
    uint64_t *w = &hs_addr_filter[b / 64];
    __atomic_store_n(w, *w | UINT64_C(1) << (b % 64), __ATOMIC_RELAXED);
  }
}

static void filter_removed(uint64_t b) {
  uint16_t c = bucket_count[b];
  if (c == COUNT_STUCK || c == 0)
    return;
  bucket_count[b] = (uint16_t)(c - 1);
  if (c == 1) {
    uint64_t *w = &hs_addr_filter[b / 64];
    __atomic_store_n(w, *w & ~(UINT64_C(1) << (b % 64)), __ATOMIC_RELAXED);
  }
}

#define INITIAL_CAPACITY 256 /* 2 KiB of slots: one page with the header */

/* The shard lock is only ever held for a handful of stores (or one mmap when
 * growing), never across an unwind, a ring write or a loader call. */
static void shard_lock(struct hs_addr_shard *s) {
  unsigned spins = 0;
  while (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE)) {
    while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED)) {
      if (++spins < 1000)
        __builtin_ia32_pause();
      else
        sched_yield(); /* the holder was preempted: let it run */
    }
  }
}

static void shard_unlock(struct hs_addr_shard *s) {
  __atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE);
}

static struct hs_addr_table *table_new(uint64_t capacity) {
  size_t bytes = sizeof(struct hs_addr_table) + capacity * sizeof(uint64_t);
  void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  struct hs_addr_table *t = m; /* zero-filled: all slots empty */
  t->mask = capacity - 1;
  return t;
}

static void table_put(struct hs_addr_table *t, uint64_t a) {
  uint64_t mask = t->mask;
  uint64_t i = hs_addr_hash(a) & mask;
  for (;;) {
    uint64_t v = t->slots[i];
    if (v == a)
      return;
    if (v == HS_ADDRSET_EMPTY) {
      __atomic_store_n(&t->slots[i], a, __ATOMIC_RELAXED);
      return;
    }
    i = (i + 1) & mask;
  }
}

int hs_addrset_insert(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint64_t b = hs_addr_bucket(a);
  struct hs_addr_shard *s = &hs_addr_shards[HS_ADDR_SHARD(b)];
  shard_lock(s);
  struct hs_addr_table *t = s->table;
  uint64_t cap = t ? t->mask + 1 : 0;
  if ((s->count + 1) * 2 > cap) {
    /* Grow: fill a new table completely, then publish it. Readers on the old
     * one still find everything that was in it. */
    struct hs_addr_table *n = table_new(cap ? cap * 2 : INITIAL_CAPACITY);
    if (n == NULL) {
      shard_unlock(s);
      return -HS_ERR_OUT_OF_MEMORY;
    }
    for (uint64_t i = 0; i < cap; i++)
      if (t->slots[i] != HS_ADDRSET_EMPTY)
        table_put(n, t->slots[i]);
    __atomic_store_n(&s->table, n, __ATOMIC_RELEASE);
    t = n;
  }
  /* A second insert of the same address (its free was missed) keeps one. */
  uint64_t mask = t->mask;
  uint64_t i = hs_addr_hash(a) & mask;
  for (;;) {
    uint64_t v = t->slots[i];
    if (v == a)
      break;
    if (v == HS_ADDRSET_EMPTY) {
      __atomic_store_n(&t->slots[i], a, __ATOMIC_RELEASE);
      s->count++;
      filter_added(b);
      break;
    }
    i = (i + 1) & mask;
  }
  shard_unlock(s);
  return HS_OK;
}

int hs_addrset_remove(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint64_t h = hs_addr_hash(a);
  uint64_t b = hs_addr_bucket(a);
  struct hs_addr_shard *s = &hs_addr_shards[HS_ADDR_SHARD(b)];
  if (!hs_addrset_probe(s, a, h))
    return 0;
  shard_lock(s);
  struct hs_addr_table *t = s->table;
  if (t == NULL) {
    shard_unlock(s);
    return 0;
  }
  uint64_t mask = t->mask;
  uint64_t i = h & mask;
  for (;;) {
    uint64_t v = t->slots[i];
    if (v == HS_ADDRSET_EMPTY) {
      shard_unlock(s); /* not there: a double free, or a racing remove */
      return 0;
    }
    if (v == a)
      break;
    i = (i + 1) & mask;
  }
  /* Backward-shift deletion keeps every probe chain unbroken without
   * tombstones. Entries move, so readers must not trust a probe that
   * overlaps it: seq is odd for the duration. */
  uint32_t seq = s->seq;
  __atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    uint64_t v = t->slots[j];
    if (v == HS_ADDRSET_EMPTY)
      break;
    uint64_t home = hs_addr_hash(v) & mask;
    /* v may move to the hole at i unless its home lies cyclically in (i, j]. */
    int home_in_range = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (!home_in_range) {
      __atomic_store_n(&t->slots[i], v, __ATOMIC_RELAXED);
      i = j;
    }
  }
  __atomic_store_n(&t->slots[i], HS_ADDRSET_EMPTY, __ATOMIC_RELAXED);
  s->count--;
  filter_removed(b);
  __atomic_store_n(&s->seq, seq + 2, __ATOMIC_RELEASE);
  shard_unlock(s);
  return 1;
}

void hs_addrset_reset(void) {
  memset(hs_addr_shards, 0, sizeof hs_addr_shards);
  /* A count is non-zero only where its bucket's bit is set (a stuck count
   * keeps its bit), so clearing the counts of set bits clears them all: a
   * count left behind with its bit cleared would skip setting the bit on the
   * next insert there, a false negative. */
  for (uint64_t w = 0; w < HS_ADDR_BUCKETS / 64; w++) {
    uint64_t bits = hs_addr_filter[w];
    while (bits) {
      unsigned i = (unsigned)__builtin_ctzll(bits);
      bucket_count[w * 64 + i] = 0;
      bits &= bits - 1;
    }
    hs_addr_filter[w] = 0;
  }
}
