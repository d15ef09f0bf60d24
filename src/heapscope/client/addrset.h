/*
 * addrset.h: the set of live sampled addresses, so that only frees of
 * sampled addresses leave the target.
 *
 * The filter. In front of the set, one bit per bucket of addresses (2^20
 * buckets, 128 KiB, a bucket = the top 20 bits of the address times a
 * 64-bit odd constant, Fibonacci hashing): set while at least one address
 * of the bucket is in the set. A free reads one word of it and, for an
 * address that was not sampled, almost always stops there: one load, one
 * predictable branch, no store, no lock, no table. No false negatives: a
 * bucket's bit is set (under its shard's lock, before the sampled malloc
 * returns the address) before any free of the address can run, and cleared
 * only when the bucket's count of addresses in the set drops to 0. False
 * positives (a free that goes on to the lookup below for nothing): the
 * share of set bits, 1 - exp(-n / 2^20) for n live sampled addresses, i.e.
 * about n / 2^20 (0.1% for 1,000, 1% for 10,000, 9% for 100,000).
 *
 * The set. 256 shards; a shard = the top 8 bits of the bucket, so each
 * filter word (64 neighbouring buckets) and each bucket count belongs to
 * exactly one shard and is only written under that shard's lock. Each
 * shard is an open-addressing table (linear probing, load <= 1/2, slots
 * chosen by a second hash, murmur3's finalizer) with:
 *   - a spinlock taken by writers (insert on a sampled malloc, remove on its
 *     free);
 *   - a sequence counter (seqlock) that a remove makes odd while it shifts
 *     entries back, so the lookup on the free path runs without any lock or
 *     store: read seq, probe, read seq again, retry if it moved.
 * Inserts never move an entry, so they leave seq alone.
 *
 * A table grows by doubling into a new anonymous mmap. Capacity and slots live
 * together behind one header pointer, published with release order, so a
 * reader always sees a consistent pair. Old tables are never unmapped: a
 * reader may still be probing one (they total less than the live table).
 */
#ifndef HEAPSCOPE_CLIENT_ADDRSET_H
#define HEAPSCOPE_CLIENT_ADDRSET_H

#include <stdint.h>

#include "common.h"

#define HS_ADDRSET_SHARDS 256
#define HS_ADDRSET_EMPTY 0 /* malloc never returns 0 for a sampled address */

#define HS_ADDR_FILTER_BITS 20
#define HS_ADDR_BUCKETS (UINT64_C(1) << HS_ADDR_FILTER_BITS)

/* Bit b of word b / 64: bucket b holds at least one address of the set. */
extern uint64_t hs_addr_filter[HS_ADDR_BUCKETS / 64] HS_HIDDEN;

struct hs_addr_table {
  uint64_t mask; /* capacity - 1; capacity is a power of two */
  uint64_t slots[];
};

struct hs_addr_shard {
  uint32_t lock;                /* writers only */
  uint32_t seq;                 /* odd while a remove moves entries */
  struct hs_addr_table *table;  /* NULL until the first insert */
  uint64_t count;               /* live entries; under lock */
  char pad[64 - 24];
} __attribute__((aligned(64)));

extern struct hs_addr_shard hs_addr_shards[HS_ADDRSET_SHARDS] HS_HIDDEN;

static inline uint64_t hs_addr_hash(uint64_t a) {
  /* murmur3's finalizer: every bit of the address moves every bit. */
  a ^= a >> 33;
  a *= UINT64_C(0xff51afd7ed558ccd);
  a ^= a >> 33;
  a *= UINT64_C(0xc4ceb9fe1a85ec53);
  a ^= a >> 33;
  return a;
}

/* The filter bucket of an address: one multiplication and a shift. */
static inline uint64_t hs_addr_bucket(uint64_t a) {
  return (a * UINT64_C(0x9e3779b97f4a7c15)) >> (64 - HS_ADDR_FILTER_BITS);
}

/* The shard of a bucket: its top 8 bits (64 buckets of a filter word and
 * their counts share one shard). */
#define HS_ADDR_SHARD(bucket) ((bucket) >> (HS_ADDR_FILTER_BITS - 8))

/* 0 when p is certainly not in the set; 1 when it may be (then ask
 * hs_addrset_contains). Relaxed: a free of p is ordered after the malloc
 * that returned p, by the program itself, and our insert came before that
 * return. */
static inline int hs_addr_maybe_sampled(const void *p) {
  uint64_t b = hs_addr_bucket((uint64_t)(uintptr_t)p);
  return (int)((__atomic_load_n(&hs_addr_filter[b / 64], __ATOMIC_RELAXED) >> (b % 64)) & 1);
}

/* Lock-free lookup of a (hash h) in shard s; see above. */
static inline int hs_addrset_probe(struct hs_addr_shard *s, uint64_t a, uint64_t h) {
  for (;;) {
    uint32_t seq0 = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
    struct hs_addr_table *t = __atomic_load_n(&s->table, __ATOMIC_ACQUIRE);
    if (t == NULL)
      return 0;
    int found = 0;
    if (!(seq0 & 1)) {
      uint64_t mask = t->mask;
      for (uint64_t i = h & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
        uint64_t v = __atomic_load_n(&t->slots[i], __ATOMIC_RELAXED);
        if (v == a) {
          found = 1;
          break;
        }
        if (v == HS_ADDRSET_EMPTY)
          break;
      }
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq0)
        return found;
    }
    __builtin_ia32_pause();
  }
}

static inline int hs_addrset_contains(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  return hs_addrset_probe(&hs_addr_shards[HS_ADDR_SHARD(hs_addr_bucket(a))], a, hs_addr_hash(a));
}

/* Adds p. HS_OK, or -HS_ERR_OUT_OF_MEMORY when the table could not grow
 * (the caller counts it; that address's free will not be sent). */
HS_HIDDEN HS_MUST_CHECK int hs_addrset_insert(const void *p);

/* Removes p. Returns 1 if it was there, 0 if not. An address that is not
 * there (a false positive of the filter, a double free) is found out by the
 * lock-free lookup, without a store. */
HS_HIDDEN HS_MUST_CHECK int hs_addrset_remove(const void *p);

/* Empties the set, in a fork child that starts a session of its own: the
 * parent's tables are dropped (left mapped), the filter and its counts
 * cleared. Only pages of the counts that hold something are touched. */
HS_HIDDEN void hs_addrset_reset(void);

#endif
