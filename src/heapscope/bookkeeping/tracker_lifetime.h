/*
 * tracker_lifetime.h: how long sampled allocations live, and their sizes,
 * per stack, beside the heap tracker's totals (tracker.h).
 *
 *   malloc (ts)  --> the live entry keeps its ts and thread; its thread's latest
 *                    malloc is now this one
 *   free (ts)    --> one cell per (stack, lifetime bucket, size bucket, flags):
 *                    lifetime = free ts - malloc ts, in 1-2-5 buckets from 1 us
 *                    to 1000 s; size, log2 buckets of the asked-for size; flags:
 *                    heaptrack's temporary (freed before its thread's next malloc:
 *                    meaningful when every malloc is a sample, -i 1), no lifetime
 *   hs_tracker_lifetimes() --> rows per (callsite, kind, bucket), cumulative: the
 *                    cells summed per callsite into lifetime, size and heaptrack
 *                    rows, and the allocations still live ("held", by their age at
 *                    the latest ts the tracker saw, and their sizes) read from the
 *                    live table then.
 *
 * So a malloc costs no lookup here and a free one (the ring reader's rate,
 * benchmarks/ingest_throughput.py): sizes are counted when an allocation is
 * freed or, still live, when the rows are asked for.
 *
 * Cells are kept per stack (its index in the tracker's stack table, which
 * never moves), not per bucket of totals: a stack's bucket is folded into
 * its callsite's when the callsite becomes known, and the rows sum the
 * stacks of each callsite at the time they are asked for. A cell is a slot
 * of a table of the tracker's stack table type keyed by
 * (stack index << 16 | flags | lifetime bucket << 8 | size bucket) and three
 * counters in a parallel array; only the cells a free made exist.
 *
 * A free whose ts is 0 (a record of a client that sent none, the Python
 * face's free() without one, a malloc at a live address) or earlier than its
 * malloc's has no lifetime: it is counted in the kind HS_LT_UNKNOWN, so the
 * kinds still add up to the allocations made.
 *
 * NB: not thread-safe; the tracker that owns it serialises callers.
 */
#ifndef HEAPSCOPE_TRACKER_LIFETIME_H
#define HEAPSCOPE_TRACKER_LIFETIME_H

#include <stddef.h>
#include <stdint.h>

#include "tracker_tables.h"

/* hs_lifetime_row.kind */
/* The bucket of FREED, HELD, UNKNOWN and HEAPTRACK rows is lifetime bucket << 8 | size
 * bucket: a row holds samples of one size class, so that the estimate of the allocations
 * behind it (heapscope/estimate.py, from the samples' mean size) is not that of mixed sizes. */
#define HS_LT_FREED 1u     /* lifetime bucket: the lifetime's (hs_lifetime_bound) */
#define HS_LT_HELD 2u      /* still live: lifetime bucket of its age at the latest ts seen */
#define HS_LT_UNKNOWN 3u   /* freed, lifetime not known (no ts); lifetime bucket 0 */
#define HS_LT_SIZE 4u      /* every allocation: bucket of log2(asked-for size), 0 for sizes 0 and 1 */
#define HS_LT_HEAPTRACK 5u /* freed before its thread's next malloc; lifetime bucket 0 */

/* Lifetime buckets: bucket 0 is [0, 1 us), bucket i is [bound(i-1), bound(i)),
 * the last has no upper bound. */
#define HS_LT_BOUNDS 28
#define HS_LT_BUCKETS (HS_LT_BOUNDS + 1)
#define HS_SIZE_BUCKETS 64

/* One cell's counters: samples, their sampled bytes, their asked-for bytes. */
struct hs_lt_cell {
  uint64_t count;
  uint64_t size;
  uint64_t real;
};

/* A cell key's flags, beside its lifetime bucket (bits 8-12) and size bucket (bits 0-5). */
#define HS_LT_KEY_UNKNOWN (1u << 13)
#define HS_LT_KEY_HEAPTRACK (1u << 14)
#define HS_LT_THREAD_CACHE 64 /* threads remembered without a lookup (direct mapped) */

struct hs_lifetimes {
  struct hs_stacks keys; /* (stack idx << 16 | flags | lifetime << 8 | size) -> its cell */
  struct hs_lt_cell *cells;
  size_t cap;
  struct hs_stacks threads; /* tid -> its index in last_seq */
  uint64_t *last_seq;       /* each thread's latest malloc seq */
  size_t threads_cap;
  struct {
    uint32_t tid;
    uint32_t idx_plus1; /* its index in last_seq + 1; 0: empty */
  } thread_cache[HS_LT_THREAD_CACHE];
  uint64_t now_ts;          /* the latest ts of an op: the age of what is still held */
};

/* Upper bound (ns, exclusive) of lifetime bucket i < HS_LT_BOUNDS. */
uint64_t hs_lifetime_bound(unsigned i);
/* The lifetime bucket of ns. */
unsigned hs_lifetime_bucket(uint64_t ns);
/* The size bucket of size: floor(log2(size)), 0 for 0 and 1. */
static inline unsigned hs_size_bucket(uint64_t size) {
  return size < 2 ? 0u : 63u - (unsigned)__builtin_clzll(size);
}

/* hs_tracker_lifetimes() (tracker.h): one cell of one callsite, cumulative (a row type
 * handed to Python: mirrored in bookkeeping/rows.py). */
struct hs_lifetime_row {
  uint64_t callsite_id;
  uint64_t kind;   /* HS_LT_* */
  uint64_t bucket; /* HS_LT_SIZE: the size bucket; else lifetime bucket << 8 | size bucket */
  uint64_t count;  /* samples */
  uint64_t size;   /* their sampled bytes */
  uint64_t real_size; /* their asked-for bytes (heapscope/estimate.py) */
};

int hs_lifetimes_init(struct hs_lifetimes *lt);
void hs_lifetimes_destroy(struct hs_lifetimes *lt);

/* A malloc applied as live entry e (its ts and tid are stamped here). -1 on
 * ENOMEM (its thread's latest malloc not known: heaptrack's figure may miss it). */
int hs_lifetimes_malloc(struct hs_lifetimes *lt, struct hs_live *e, uint64_t ts, uint32_t tid);
/* The free at ts of live entry e (before its removal), of stack index stack_idx. */
int hs_lifetimes_free(struct hs_lifetimes *lt, const struct hs_live *e, uint32_t stack_idx, uint64_t ts);

#endif /* HEAPSCOPE_TRACKER_LIFETIME_H */
