/* tracker_lifetime.c: lifetime and size histograms per stack, and their rows per callsite. */
#include "tracker_lifetime.h"

#include <stdlib.h>
#include <string.h>

#include "tracker.h"

#define HS_LT_KEYS_INITIAL 256
#define HS_LT_THREADS_INITIAL 16

/* 1-2-5 steps from 1 us to 1000 s: a threshold a person writes (1ms, 50us, 2s)
 * is a bound, and a decade is three buckets. */
static const uint64_t bounds[HS_LT_BOUNDS] = {
    1000ull,          2000ull,          5000ull,          10000ull,          20000ull,
    50000ull,         100000ull,        200000ull,        500000ull,         1000000ull,
    2000000ull,       5000000ull,       10000000ull,      20000000ull,       50000000ull,
    100000000ull,     200000000ull,     500000000ull,     1000000000ull,     2000000000ull,
    5000000000ull,    10000000000ull,   20000000000ull,   50000000000ull,    100000000000ull,
    200000000000ull,  500000000000ull,  1000000000000ull,
};

uint64_t hs_lifetime_bound(unsigned i) { return i < HS_LT_BOUNDS ? bounds[i] : UINT64_MAX; }

/* The bucket of 2^l: where the bucket of any ns in [2^l, 2^(l+1)) starts, at most one bound
 * below it (an octave holds at most one 1-2-5 step). A bisection's branches, at every free,
 * cost the ring reader more than this lookup does. */
static const uint8_t octave_start[64] = {
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  1,  2,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
    11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 20, 21, 22, 23, 24, 25, 26, 27, 28, 28, 28, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28,
};

unsigned hs_lifetime_bucket(uint64_t ns) {
  if (ns == 0) return 0;
  unsigned b = octave_start[63 - __builtin_clzll(ns)];
  return b < HS_LT_BOUNDS && ns >= bounds[b] ? b + 1 : b;
}

int hs_lifetimes_init(struct hs_lifetimes *lt) {
  memset(lt, 0, sizeof *lt);
  if (hs_stacks_init(&lt->keys, HS_LT_KEYS_INITIAL) < 0) return -1;
  if (hs_stacks_init(&lt->threads, HS_LT_THREADS_INITIAL) < 0) {
    hs_stacks_destroy(&lt->keys);
    return -1;
  }
  return 0;
}

void hs_lifetimes_destroy(struct hs_lifetimes *lt) {
  if (lt->keys.slots) hs_stacks_destroy(&lt->keys);
  if (lt->threads.slots) hs_stacks_destroy(&lt->threads);
  free(lt->cells);
  free(lt->last_seq);
  memset(lt, 0, sizeof *lt);
}

/* The index of the entry made on first sight for key in table keys, its array
 * (of `size` bytes an entry, `*cap` of them) grown to hold it, the new
 * entries zero. -1 on ENOMEM. */
static int64_t entry(struct hs_stacks *keys, void **array, size_t *cap, size_t size, uint64_t key) {
  struct hs_stack_slot *k = hs_stacks_get(keys, key);
  if (!k) return -1;
  size_t i = k->idx_plus1 - 1;
  if (i >= *cap) {
    size_t n = *cap ? *cap * 2 : 256;
    while (n <= i) n *= 2;
    uint8_t *grown = realloc(*array, n * size);
    if (!grown) return -1; /* the key stays, with zero counters */
    memset(grown + *cap * size, 0, (n - *cap) * size);
    *array = grown;
    *cap = n;
  }
  return (int64_t)i;
}

/* The index of tid's entry in last_seq, made on first sight: a thread is most often one
 * the cache holds. -1 on ENOMEM. */
static inline int64_t thread_entry(struct hs_lifetimes *lt, uint32_t tid) {
  unsigned slot = (tid ^ tid >> 6) & (HS_LT_THREAD_CACHE - 1);
  if (lt->thread_cache[slot].idx_plus1 && lt->thread_cache[slot].tid == tid)
    return (int64_t)lt->thread_cache[slot].idx_plus1 - 1;
  int64_t th = entry(&lt->threads, (void **)&lt->last_seq, &lt->threads_cap, sizeof *lt->last_seq, tid);
  if (th >= 0 && th < UINT32_MAX) {
    lt->thread_cache[slot].tid = tid;
    lt->thread_cache[slot].idx_plus1 = (uint32_t)th + 1;
  }
  return th;
}

int hs_lifetimes_malloc(struct hs_lifetimes *lt, struct hs_live *e, uint64_t ts, uint32_t tid) {
  e->ts = ts;
  e->tid = tid;
  if (ts > lt->now_ts) lt->now_ts = ts;
  int64_t th = thread_entry(lt, tid);
  if (th < 0) return -1;
  lt->last_seq[th] = e->seq;
  return 0;
}

int hs_lifetimes_free(struct hs_lifetimes *lt, const struct hs_live *e, uint32_t stack_idx, uint64_t ts) {
  if (ts > lt->now_ts) lt->now_ts = ts;
  uint64_t key = (uint64_t)stack_idx << 16 | hs_size_bucket(e->alloc_size);
  /* Its thread's latest malloc is still this one: heaptrack's temporary. */
  int64_t th = thread_entry(lt, e->tid);
  if (th >= 0 && lt->last_seq[th] == e->seq) key |= HS_LT_KEY_HEAPTRACK;
  if (ts == 0 || e->ts == 0 || ts < e->ts)
    key |= HS_LT_KEY_UNKNOWN;
  else
    key |= (uint64_t)hs_lifetime_bucket(ts - e->ts) << 8;
  int64_t i = entry(&lt->keys, (void **)&lt->cells, &lt->cap, sizeof *lt->cells, key);
  if (i < 0) return -1;
  struct hs_lt_cell *c = &lt->cells[i];
  c->count++;
  c->size += e->sample_size;
  c->real += e->alloc_size;
  return th < 0 ? -1 : 0;
}

/* ---- rows (tracker.h: hs_tracker_lifetimes) ---- */

/* The callsite stack index idx books into now; 0 while it has none. */
static uint64_t callsite_of(struct hs_tracker *t, uint32_t idx) {
  const struct hs_stack_slot *s = hs_stacks_get(&t->stacks, t->stacks.ids[idx]); /* there: no add */
  return s && s->bucket != HS_NO_BUCKET ? t->rest[s->bucket].callsite_id : 0;
}

/* One more sample in the row of (callsite, kind, bucket), made on first sight
 * in rows[] (indexed by the table `sums`). */
static int sum_into(struct hs_stacks *sums, struct hs_lifetime_row **rows, size_t *cap, uint64_t callsite_id,
                    unsigned kind, unsigned bucket, const struct hs_lt_cell *c) {
  if (callsite_id >> 39) return 0; /* beyond the key: never the trie's */
  int64_t i = entry(sums, (void **)rows, cap, sizeof **rows, callsite_id << 24 | (uint64_t)kind << 16 | bucket);
  if (i < 0) return -1;
  struct hs_lifetime_row *r = &(*rows)[i];
  r->callsite_id = callsite_id;
  r->kind = kind;
  r->bucket = bucket;
  r->count += c->count;
  r->size += c->size;
  r->real_size += c->real;
  return 0;
}

/* The allocations still live, by their age at lt->now_ts. */
static int sum_held(struct hs_tracker *t, struct hs_stacks *sums, struct hs_lifetime_row **rows, size_t *cap) {
  for (size_t i = 0; i <= t->live.mask; i++) {
    const struct hs_live *e = &t->live.slots[i];
    if (!e->bucket_plus1) continue;
    uint32_t idx = t->threads ? (uint32_t)t->thread_keys.ids[e->stack_idx] : e->stack_idx;
    uint64_t age = t->lt.now_ts > e->ts && e->ts ? t->lt.now_ts - e->ts : 0;
    struct hs_lt_cell c = {1, e->sample_size, e->alloc_size};
    uint64_t cs = callsite_of(t, idx);
    unsigned size = hs_size_bucket(e->alloc_size);
    if (cs && (sum_into(sums, rows, cap, cs, HS_LT_HELD, hs_lifetime_bucket(age) << 8 | size, &c) < 0 ||
               sum_into(sums, rows, cap, cs, HS_LT_SIZE, size, &c) < 0))
      return -1;
  }
  return 0;
}

/* A cell's rows: its lifetime (or its lack), its size, heaptrack's temporary. */
static int sum_cell(struct hs_stacks *sums, struct hs_lifetime_row **rows, size_t *cap, uint64_t cs, uint64_t key,
                    const struct hs_lt_cell *c) {
  const unsigned life = (unsigned)(key >> 8) & 0x1f, size = (unsigned)key & 0x3f;
  int rc = key & HS_LT_KEY_UNKNOWN ? sum_into(sums, rows, cap, cs, HS_LT_UNKNOWN, size, c)
                                   : sum_into(sums, rows, cap, cs, HS_LT_FREED, life << 8 | size, c);
  if (rc == 0) rc = sum_into(sums, rows, cap, cs, HS_LT_SIZE, size, c);
  if (rc == 0 && key & HS_LT_KEY_HEAPTRACK) rc = sum_into(sums, rows, cap, cs, HS_LT_HEAPTRACK, size, c);
  return rc;
}

int64_t hs_tracker_lifetimes(struct hs_tracker *t) {
  struct hs_stacks sums;
  struct hs_lifetime_row *rows = NULL;
  size_t cap = 0;
  if (hs_stacks_init(&sums, 256) < 0) return -1;
  int rc = 0;
  size_t n = t->lt.keys.count < t->lt.cap ? t->lt.keys.count : t->lt.cap; /* keys past cap counted nothing */
  for (size_t i = 0; i < n && rc == 0; i++) {
    const uint64_t key = t->lt.keys.ids[i];
    uint64_t cs = callsite_of(t, (uint32_t)(key >> 16));
    if (cs) rc = sum_cell(&sums, &rows, &cap, cs, key, &t->lt.cells[i]);
  }
  if (rc == 0) rc = sum_held(t, &sums, &rows, &cap);
  size_t count = sums.count < cap ? sums.count : cap;
  t->out.len = 0;
  if (rc == 0 && hs_buf_reserve(&t->out, count * sizeof *rows + 1) == 0) {
    if (count) memcpy(t->out.p, rows, count * sizeof *rows);
    t->out.len = count * sizeof *rows;
  } else {
    rc = -1;
  }
  free(rows);
  hs_stacks_destroy(&sums);
  return rc < 0 ? -1 : (int64_t)count;
}
