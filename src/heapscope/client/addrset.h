/*
 * addrset.h: the set of live sampled addresses, so that only frees of
 * sampled addresses leave the target.
 *
 * The filter (so that a free of an unsampled address costs one
 * predictable branch and no shared cache line). In front of the set, one
 * bit per 16-byte granule of the address space, modulo its span: bucket(a)
 * = (a >> 4) mod 2^25, so the bitmap is 2^25 bits (4 MiB of zero-filled
 * static storage, pages touched only where samples land) and spans 512 MiB
 * of addresses. A bit is set while at least one key of its bucket is in the
 * set. A free reads one word, and for an address that was not sampled
 * almost always stops there: shift, mask, one load, one bit test, one
 * predictable branch; no store, no lock, no table, no TLS.
 *
 * Why this shape (measured by benchmarks/free_path.py, benchmarks/RESULTS.md
 * "Free of an unsampled address"): the buckets are neighbours where
 * the addresses are, so one 64-bit word covers 1 KiB of neighbouring
 * addresses and one cache line 8 KiB: a program that frees a list, an
 * array of objects or a pool in address order reads the same line for
 * dozens of frees, where a hashed bucket missed D1 on nearly every free.
 * And a bucket is exact inside any 512 MiB window: two live allocations of
 * malloc or pymalloc never share a 16-byte granule, so a free of an
 * unsampled address goes on to the table only when its granule aliases a
 * sampled one modulo 512 MiB (heap regions further apart than that, e.g.
 * the brk heap and an mmap arena). The share of frees that do is at most the
 * density of live samples per granule of the aliasing region: with the
 * sampler's mean of one sample per interval bytes, about 16 / interval
 * (0.4% at 4096), and 0 while the heap fits in one window; the hashed
 * filter it replaces had n / 2^20 (5% at 50,000 live samples) wherever the
 * heap was.
 *
 * No false negatives: a bucket's bit is set (under its shard's lock, before
 * the sampled malloc returns the address) before any free of the address
 * can run, and cleared only when no key of the bucket is left in the table
 * (the remove looks: all keys of a bucket share a probe run, below) and the
 * bucket is not pinned (hs_addrset_pin). Keys of different heaps of one
 * address (addr ^ heap id << 56, record.h, heaps.c) share a bucket, so do
 * aliases 512 MiB apart and a custom heap's objects smaller than 16 bytes.
 *
 * The set. 256 shards; a shard = the low 8 bits of the filter word index
 * (address bits 10..17), so each filter word belongs to exactly one shard and
 * is only written under that shard's lock. Each shard is an open-addressing
 * table (linear probing, load <= 1/2) whose home slot is a hash of the
 * BUCKET (hs_addr_hash), not of the key: the keys of one bucket all
 * lie in the probe run from their common home to the next empty slot, so a
 * remove learns whether its bucket still holds a key from the run it probes
 * and shifts anyway (no per-bucket counts to keep: the counts of the
 * old filter were 2 MiB and a cache miss per insert and remove). Each shard
 * has:
 *   - a spinlock taken by writers (insert on a sampled malloc, remove on its
 *     free);
 *   - a sequence counter (seqlock) that a remove makes odd while it shifts
 *     entries back, so the lookup on the free path runs without any lock or
 *     store: read seq, probe, read seq again, retry if it moved.
 * Inserts never move an entry, so they leave seq alone.
 *
 * A shard's first table (256 slots) is in static storage, beside the other
 * shards' (addrset.c); a table grows by doubling into a new anonymous mmap. Capacity and slots live
 * together behind one header pointer, published with release order, so a
 * reader always sees a consistent pair. Old tables are never unmapped: a
 * reader may still be probing one (they total less than the live table).
 */
#ifndef HEAPSCOPE_CLIENT_ADDRSET_H
#define HEAPSCOPE_CLIENT_ADDRSET_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define HS_ADDRSET_SHARDS 256
#define HS_ADDRSET_EMPTY 0 /* malloc never returns 0 for a sampled address */

#define HS_ADDR_GRANULE_SHIFT 4 /* 16 bytes: malloc's and pymalloc's alignment */
#define HS_ADDR_FILTER_BITS 25
#define HS_ADDR_BUCKETS (UINT64_C(1) << HS_ADDR_FILTER_BITS)
#define HS_ADDR_WORDS (HS_ADDR_BUCKETS / 64)
/* Bytes of address space the filter spans before it wraps around (512 MiB). */
#define HS_ADDR_SPAN (HS_ADDR_BUCKETS << HS_ADDR_GRANULE_SHIFT)

/* Bit b % 64 of word b / 64: bucket b holds at least one key of the set (or
 * is pinned). Page-aligned, so that a fork reset can drop its pages. */
extern uint64_t hs_addr_filter[HS_ADDR_WORDS] HS_HIDDEN;

struct hs_addr_table {
  uint64_t mask; /* capacity - 1; capacity is a power of two */
  uint64_t slots[];
};

struct hs_addr_shard {
  uint32_t lock;                /* writers only */
  uint32_t seq;                 /* odd while a remove moves entries */
  struct hs_addr_table *table;  /* NULL until the first insert */
  uint64_t count;               /* live entries; under lock */
  /* table->mask, for the writers (under lock): one cache line less to
   * load per insert and remove than the table's header.
   * Readers keep the pair behind the table pointer. */
  uint64_t mask;
  char pad[64 - 32];
} __attribute__((aligned(64)));

extern struct hs_addr_shard hs_addr_shards[HS_ADDRSET_SHARDS] HS_HIDDEN;

/* The home slot hash of a bucket b (< 2^25), masked by the table's mask:
 * Fibonacci hashing, b times 2^64 / phi, taken from bit 32 up, where every
 * bit of b reaches (for masks up to 2^32 - 1). One multiply and a shift:
 * a remove computes it for every entry it shifts back, and murmur3's
 * finalizer there cost ~10 instructions each. The buckets of
 * one shard differ in their low 6 and high 11 bits, and samples land on
 * them in runs and strides: a multiplicative hash spreads arithmetic
 * progressions evenly. */
static inline uint64_t hs_addr_hash(uint64_t b) {
  return (b * UINT64_C(0x9e3779b97f4a7c15)) >> 32;
}

/* The filter bucket of a key: its 16-byte granule modulo the span. Bits 56
 * and up (a heap's key) do not reach it. */
static inline uint64_t hs_addr_bucket(uint64_t a) {
  return (a >> HS_ADDR_GRANULE_SHIFT) & (HS_ADDR_BUCKETS - 1);
}

/* The shard of a bucket: the low 8 bits of its filter word's index. */
#define HS_ADDR_SHARD(bucket) (((bucket) >> 6) & (HS_ADDRSET_SHARDS - 1))

/* 0 when p is certainly not in the set; 1 when it may be (then ask
 * hs_addrset_contains). The same answer for every key of p's granule, so
 * p ^ (heap << 56) need not be formed. Relaxed: a free of p is ordered after
 * the malloc that returned p, by the program itself, and our insert came
 * before that return. */
static inline int hs_addr_maybe_sampled(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint64_t w = __atomic_load_n(&hs_addr_filter[(a >> (HS_ADDR_GRANULE_SHIFT + 6)) & (HS_ADDR_WORDS - 1)],
                               __ATOMIC_RELAXED);
  return (int)((w >> ((a >> HS_ADDR_GRANULE_SHIFT) & 63)) & 1);
}

/* Lock-free lookup of a (home slot hash h) in shard s; see above. */
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
  uint64_t b = hs_addr_bucket(a);
  return hs_addrset_probe(&hs_addr_shards[HS_ADDR_SHARD(b)], a, hs_addr_hash(b));
}

/* Adds p. HS_OK, or -HS_ERR_OUT_OF_MEMORY when the table could not grow
 * (the caller counts it; that address's free will not be sent). */
HS_HIDDEN HS_MUST_CHECK int hs_addrset_insert(const void *p);

/* Removes p. Returns 1 if it was there, 0 if not. An address that is not
 * there (a false positive of the filter, a double free) is found out by the
 * lock-free lookup, without a store. */
HS_HIDDEN HS_MUST_CHECK int hs_addrset_remove(const void *p);

/* Keeps the bits of every granule of [p, p + bytes) set for good: the
 * client's bootstrap arena (real.h), whose pointers must never reach the
 * real free, so that the free hook needs no range check of its own. One
 * range (a second call replaces it); call it before any such pointer can be
 * freed. Costs a false positive to frees that alias the range modulo the
 * span (64 KiB in 512 MiB). */
HS_HIDDEN void hs_addrset_pin(const void *p, size_t bytes);

/* Empties the set, in a fork child that starts a session of its own: the
 * parent's tables are dropped (left mapped), the filter's pages dropped
 * (zero again, and given back) and the pinned range set again. */
HS_HIDDEN void hs_addrset_reset(void);

#endif
