/*
 * addrset.h: the set of live sampled addresses, so that only frees of
 * sampled addresses leave the target.
 *
 * 256 shards chosen by a hash of the address. Each shard is an open-addressing
 * table (linear probing, load <= 1/2) with:
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

/* A counting pre-filter in front of the tables: how many live entries hash
 * to each counter (sticky at 255). Most frees are of unsampled addresses
 * (every pymalloc free goes through the hook), and a probe of a shard table
 * is a cache miss; this 64 KiB array mostly stays in cache, and a 0 answers
 * "not there" at once. Other bits of the hash than the shard's. */
#define HS_ADDR_FILTER_SIZE 65536u
extern uint8_t hs_addr_filter[HS_ADDR_FILTER_SIZE] HS_HIDDEN;
#define HS_ADDR_FILTER(h) (((h) >> 20) & (HS_ADDR_FILTER_SIZE - 1))

static inline uint64_t hs_addr_hash(uint64_t a) {
  /* murmur3's finalizer: every bit of the address moves every bit. */
  a ^= a >> 33;
  a *= UINT64_C(0xff51afd7ed558ccd);
  a ^= a >> 33;
  a *= UINT64_C(0xc4ceb9fe1a85ec53);
  a ^= a >> 33;
  return a;
}

#define HS_ADDR_SHARD(h) ((h) >> 56) /* top 8 bits: the shard */

/* Lock-free lookup; see above. */
static inline int hs_addrset_contains(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint64_t h = hs_addr_hash(a);
  if (__atomic_load_n(&hs_addr_filter[HS_ADDR_FILTER(h)], __ATOMIC_RELAXED) == 0)
    return 0; /* inserted before this free (the allocation returned first): seen */
  struct hs_addr_shard *s = &hs_addr_shards[HS_ADDR_SHARD(h)];
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

/* Adds p. HS_OK, or -HS_ERR_OUT_OF_MEMORY when the table could not grow
 * (the caller counts it; that address's free will not be sent). */
HS_HIDDEN HS_MUST_CHECK int hs_addrset_insert(const void *p);

/* Removes p. Returns 1 if it was there, 0 if not. */
HS_HIDDEN HS_MUST_CHECK int hs_addrset_remove(const void *p);

#endif
