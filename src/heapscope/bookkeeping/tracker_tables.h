/*
 * tracker_tables.h: the two hash tables of the heap tracker (tracker.h).
 *
 *   hs_live_table    addr -> {seq, sample_size, alloc_size, stack_idx, bucket}
 *                    the live sampled allocations; entries come and go.
 *   hs_stacks        stack_id -> {index into a dense array of stack ids,
 *                    the bucket of totals it books into} (never deleted, so
 *                    indices are stable and a live entry can point at its
 *                    stack with a u32).
 *
 * Both use open addressing with linear probing over a power-of-two slot
 * array, keys mixed with the splitmix64 finalizer (addresses are 16-byte
 * aligned and often in arithmetic progressions, so their low bits alone
 * would cluster). The live table deletes with backward shift, so it never
 * needs tombstones. The hot lookups are static inline here; growth lives in
 * tracker_tables.c.
 *
 * NB: not thread-safe; the tracker that owns them serialises callers.
 */
#ifndef HEAPSCOPE_TRACKER_TABLES_H
#define HEAPSCOPE_TRACKER_TABLES_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t hs_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* ---- live sampled allocations, keyed by address ---- */

struct hs_live {
  uint64_t addr;
  uint64_t seq;         /* sequence number of the malloc that made it live */
  uint64_t sample_size;
  uint64_t alloc_size;
  uint32_t stack_idx;   /* index into hs_stacks.ids; in a tracker that keeps
                           threads, into its thread_keys instead (tracker.c
                           live_stack): (stack, thread) in one u32 */
  uint32_t bucket_plus1; /* the tracker's bucket it was booked in, + 1; 0 = empty slot
                           (so address 0 needs no special case) */
  uint64_t ts;          /* of its malloc: its lifetime starts (tracker_lifetime.h) */
  uint32_t tid;         /* the thread of its malloc (0 = not known) */
  uint32_t unused;
};

struct hs_live_table {
  struct hs_live *slots;
  size_t mask;  /* capacity - 1 */
  size_t count;
};

int hs_live_init(struct hs_live_table *t, size_t capacity);
void hs_live_destroy(struct hs_live_table *t);
int hs_live_grow(struct hs_live_table *t);
void hs_live_remove(struct hs_live_table *t, struct hs_live *e);

/* Grow when the next insert would pass 5/8 load. Returns -1 on ENOMEM. */
static inline int hs_live_reserve(struct hs_live_table *t) {
  size_t cap = t->mask + 1;
  if ((t->count + 1) * 8 > cap * 5) return hs_live_grow(t);
  return 0;
}

static inline struct hs_live *hs_live_find(const struct hs_live_table *t, uint64_t addr) {
  size_t i = (size_t)hs_mix64(addr) & t->mask;
  for (;;) {
    struct hs_live *e = &t->slots[i];
    if (!e->bucket_plus1) return NULL;
    if (e->addr == addr) return e;
    i = (i + 1) & t->mask;
  }
}

/* The slot holding addr, or the empty slot where it belongs (bucket_plus1 == 0: the
 * caller fills it and counts it). Call hs_live_reserve() first. */
static inline struct hs_live *hs_live_slot(const struct hs_live_table *t, uint64_t addr) {
  size_t i = (size_t)hs_mix64(addr) & t->mask;
  for (;;) {
    struct hs_live *e = &t->slots[i];
    if (!e->bucket_plus1 || e->addr == addr) return e;
    i = (i + 1) & t->mask;
  }
}

/* ---- stacks, keyed by stack id ---- */

#define HS_NO_BUCKET UINT32_MAX

/* One stack the tracker has seen. Its ops are booked in buckets[bucket] of
 * the tracker: its own bucket until the stack's callsite is known, then the
 * callsite's (tracker.h). The bucket lives in the hash slot, so a malloc
 * finds it with the lookup it makes anyway. */
struct hs_stack_slot {
  uint64_t stack_id;
  uint32_t idx_plus1; /* 0 = empty slot */
  uint32_t bucket;    /* HS_NO_BUCKET until the tracker gives it one */
};

struct hs_stacks {
  struct hs_stack_slot *slots;
  size_t mask;
  uint64_t *ids; /* dense, in first-seen order: ids[idx] */
  size_t count;
  size_t ids_cap;
};

int hs_stacks_init(struct hs_stacks *s, size_t capacity);
void hs_stacks_destroy(struct hs_stacks *s);
/* Slow path of hs_stacks_get: append a new stack. NULL on ENOMEM. */
struct hs_stack_slot *hs_stacks_add(struct hs_stacks *s, uint64_t stack_id);

/* The slot of stack_id, created on first sight (bucket HS_NO_BUCKET); valid
 * until the next stack is added. NULL on ENOMEM. */
static inline struct hs_stack_slot *hs_stacks_get(struct hs_stacks *s, uint64_t stack_id) {
  size_t i = (size_t)hs_mix64(stack_id) & s->mask;
  for (;;) {
    struct hs_stack_slot *slot = &s->slots[i];
    if (!slot->idx_plus1) return hs_stacks_add(s, stack_id);
    if (slot->stack_id == stack_id) return slot;
    i = (i + 1) & s->mask;
  }
}

#endif /* HEAPSCOPE_TRACKER_TABLES_H */
