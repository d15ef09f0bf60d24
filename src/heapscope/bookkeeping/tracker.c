/* tracker.c: sequence ordering, the live table, totals per callsite, the peak, dump rows. */
#include "tracker.h"

#include "tracker_labels.h"

#include <stdlib.h>
#include <string.h>

#define HS_LIVE_INITIAL 1024
#define HS_STACKS_INITIAL 256
#define HS_CALLSITES_INITIAL 256

int hs_buf_reserve(struct hs_buf *b, size_t more) {
  if (b->cap - b->len >= more) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < more) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

/* ---- buckets ---- */

/* win_start covers buckets [0, n) (grown geometrically), the new entries zero. */
static int window_cover(struct hs_tracker *t, size_t n) {
  if (n <= t->win_n) return 0;
  size_t cap = t->win_n ? t->win_n : 256;
  while (cap < n) cap *= 2;
  struct hs_totals *w = realloc(t->win_start, cap * sizeof *w);
  if (!w) return -1;
  memset(w + t->win_n, 0, (cap - t->win_n) * sizeof *w);
  t->win_start = w;
  t->win_n = cap;
  return 0;
}

static int64_t bucket_new(struct hs_tracker *t, uint64_t callsite_id, uint32_t stack_idx) {
  if (t->nbuckets >= UINT32_MAX - 1) return -1;
  if (t->nbuckets == t->buckets_cap) {
    size_t cap = t->buckets_cap ? t->buckets_cap * 2 : 256;
    struct hs_bucket *b = realloc(t->buckets, cap * sizeof *b);
    if (!b) return -1;
    t->buckets = b;
    struct hs_bucket_rest *r = realloc(t->rest, cap * sizeof *r);
    if (!r) return -1; /* buckets grew alone: harmless, the capacity stays */
    t->rest = r;
    t->buckets_cap = cap;
  }
  size_t i = t->nbuckets;
  if (t->pk->win_epoch) {
    /* A window is open: made in it, the bucket held nothing at its start. */
    if (window_cover(t, i + 1) < 0) return -1;
    t->win_start[i] = (struct hs_totals){0};
  }
  memset(&t->buckets[i], 0, sizeof t->buckets[i]);
  memset(&t->rest[i], 0, sizeof t->rest[i]);
  t->buckets[i].epoch = t->pk->peak_epoch; /* it did not exist at the peak: all zero there */
  t->buckets[i].stack_idx = stack_idx;
  t->rest[i].callsite_id = callsite_id;
  return (int64_t)t->nbuckets++;
}

/* Bucket i's state at the peak. */
static inline struct hs_totals at_peak(const struct hs_tracker *t, size_t i) {
  return t->buckets[i].epoch != t->pk->peak_epoch ? t->buckets[i].cur : t->rest[i].at_peak;
}

/* Bucket i's state at the window's start (zero when no window is open). */
static inline struct hs_totals window_start_of(const struct hs_tracker *t, size_t i) {
  if (!t->pk->win_epoch) return (struct hs_totals){0};
  return t->buckets[i].epoch < t->pk->win_epoch ? t->buckets[i].cur : t->win_start[i];
}

/* Call before changing b: its first change since the peak saves its state there,
 * and its first change since the window's start (itself a peak epoch) its state then. */
static inline void touch(const struct hs_tracker *t, struct hs_bucket *b) {
  const uint64_t epoch = t->pk->peak_epoch;
  if (b->epoch != epoch) {
    const size_t i = (size_t)(b - t->buckets);
    if (b->epoch < t->pk->win_epoch) t->win_start[i] = b->cur;
    t->rest[i].at_peak = b->cur;
    b->epoch = epoch;
  }
}

static inline void totals_add(struct hs_totals *to, const struct hs_totals *x) {
  to->alloc_bytes += x->alloc_bytes;
  to->free_bytes += x->free_bytes;
  to->alloc_count += x->alloc_count;
  to->free_count += x->free_count;
  to->alloc_real += x->alloc_real;
  to->free_real += x->free_real;
}

/* ---- applying ops ---- */

static void stream_row(struct hs_tracker *t, uint64_t kind, uint64_t seq, uint64_t addr,
                       uint64_t alloc_size, uint64_t sample_size, uint64_t stack_id, uint64_t ts) {
  if (hs_buf_reserve(&t->stream_rows, sizeof(struct hs_stream_row)) < 0) {
    t->oom = 1;
    return;
  }
  struct hs_stream_row row = {kind, seq, addr, alloc_size, sample_size, stack_id, ts};
  memcpy(t->stream_rows.p + t->stream_rows.len, &row, sizeof row);
  t->stream_rows.len += sizeof row;
}

/* The bucket a live allocation books its free in: the one of its malloc,
 * or the callsite's that one was folded into since. */
static inline struct hs_bucket *bucket_of(const struct hs_tracker *t, const struct hs_live *e) {
  struct hs_bucket *b = &t->buckets[e->bucket_plus1 - 1];
  return b->into_plus1 ? &t->buckets[b->into_plus1 - 1] : b;
}

/* ---- per (stack, thread) totals (threads only) ---- */

/* Out of line, and behind one branch on t->threads that a plain recording
 * always predicts: the ops of a tracker that does not keep threads pay no
 * more than that (benchmarks/ingest_throughput.py --threads measures both).
 * A live allocation of such a tracker holds its (stack, thread) key's index
 * where it would hold its stack's, so the live entries keep their size and
 * a free finds its thread's totals without a lookup. */
#define HS_COLD __attribute__((noinline, cold))

/* A malloc in its thread's totals: the index of its (stack idx, tid) key,
 * made on first sight. -1 on ENOMEM (nothing booked). */
HS_COLD static int64_t thread_malloc(struct hs_tracker *t, uint32_t stack_idx, const struct hs_op *op) {
  struct hs_stack_slot *k = hs_stacks_get(&t->thread_keys, (uint64_t)op->tid << 32 | stack_idx);
  if (!k) return -1;
  size_t i = k->idx_plus1 - 1;
  if (i >= t->thread_cap) {
    size_t cap = t->thread_cap ? t->thread_cap * 2 : 256;
    while (cap <= i) cap *= 2;
    struct hs_totals *n = realloc(t->thread_totals, cap * sizeof *n);
    if (!n) return -1; /* the key stays, with zero totals */
    memset(n + t->thread_cap, 0, (cap - t->thread_cap) * sizeof *n);
    t->thread_totals = n;
    t->thread_cap = cap;
  }
  struct hs_totals *x = &t->thread_totals[i];
  x->alloc_bytes += op->sample_size;
  x->alloc_count++;
  x->alloc_real += op->alloc_size;
  return (int64_t)i;
}

/* A free of e in the totals of the thread that allocated it. */
HS_COLD static void thread_free(struct hs_tracker *t, const struct hs_live *e) {
  struct hs_totals *x = &t->thread_totals[e->stack_idx];
  x->free_bytes += e->sample_size;
  x->free_count++;
  x->free_real += e->alloc_size;
}

/* The index in t->stacks.ids of live allocation e's stack. */
static inline uint32_t live_stack(const struct hs_tracker *t, const struct hs_live *e) {
  return __builtin_expect(t->threads, 0) ? (uint32_t)t->thread_keys.ids[e->stack_idx] : e->stack_idx;
}

/* The free at ts (0: not known) of live allocation e. */
static void book_free(struct hs_tracker *t, const struct hs_live *e, uint64_t ts) {
  if (hs_lifetimes_free(&t->lt, e, live_stack(t, e), ts) < 0) t->oom = 1;
  struct hs_bucket *b = bucket_of(t, e);
  touch(t, b);
  b->cur.free_bytes += e->sample_size;
  b->cur.free_count++;
  b->cur.free_real += e->alloc_size;
  t->cur_unfreed -= e->sample_size;
  t->pk->cur_unfreed -= e->sample_size;
  if (__builtin_expect(t->threads, 0)) thread_free(t, e);
  if (__builtin_expect(t->labels != NULL, 0)) hs_labels_on_free(t, e->addr);
}

/* e freed by op (a FREE, or a MALLOC at its address, whose ts dates the free) in the series. */
static inline void series_free(struct hs_tracker *t, const struct hs_live *e, const struct hs_op *op) {
  hs_series_note_free(&t->series, op->ts, op->seq, t->cur_unfreed);
  hs_series_freed(&t->series, e->seq, e->sample_size, e->bucket_plus1 - 1);
}

static void apply_malloc(struct hs_tracker *t, const struct hs_op *op) {
  if (hs_live_reserve(&t->live) < 0) {
    t->oom = 1;
    return;
  }
  struct hs_stack_slot *s = hs_stacks_get(&t->stacks, op->stack_id);
  if (!s) {
    t->oom = 1;
    return;
  }
  const uint32_t idx = s->idx_plus1 - 1;
  if (s->bucket == HS_NO_BUCKET) {
    int64_t b = bucket_new(t, 0, idx);
    if (b < 0) {
      t->oom = 1;
      return;
    }
    s->bucket = (uint32_t)b;
  }
  uint32_t live_idx = idx;
  if (__builtin_expect(t->threads, 0)) {
    /* The last step that can fail, so that running out of memory books
     * nothing at all. s stays valid: thread_keys is a table of its own. */
    int64_t k = thread_malloc(t, idx, op);
    if (k < 0) {
      t->oom = 1;
      return;
    }
    live_idx = (uint32_t)k;
  }
  struct hs_live *e = hs_live_slot(&t->live, op->addr);
  if (e->bucket_plus1) {
    /* Its free was never seen (or not yet: then it will count as untracked). */
    book_free(t, e, 0);
    series_free(t, e, op); /* dated by the malloc that found it */
    t->st.implicit_frees++;
  } else {
    e->addr = op->addr;
    t->live.count++;
  }
  e->seq = op->seq;
  e->sample_size = op->sample_size;
  e->alloc_size = op->alloc_size;
  e->stack_idx = live_idx;
  e->bucket_plus1 = s->bucket + 1;
  if (hs_lifetimes_malloc(&t->lt, e, op->ts, op->tid) < 0) t->oom = 1;
  struct hs_bucket *b = &t->buckets[s->bucket];
  touch(t, b);
  b->cur.alloc_bytes += op->sample_size;
  b->cur.alloc_count++;
  b->cur.alloc_real += op->alloc_size;
  if (__builtin_expect(op->label_set != 0, 0)) hs_labels_on_malloc(t, idx, op); /* before a new peak's epoch */
  t->cur_unfreed += op->sample_size;
  t->alloc_bytes += op->sample_size;
  struct hs_peak *pk = t->pk;
  pk->cur_unfreed += op->sample_size;
  if (pk->cur_unfreed > pk->max_unfreed) {
    pk->max_unfreed = pk->cur_unfreed;
    pk->max_ts = op->ts;
    pk->peak_epoch++; /* every bucket's cur, in every tracker of the peak, is now its state there */
  }
  if (op->ts > t->last_ts) t->last_ts = op->ts;
  hs_series_note(&t->series, op->ts, op->seq, t->cur_unfreed, t->alloc_bytes);
  if (t->stream) {
    stream_row(t, HS_OP_MALLOC, op->seq, op->addr, op->alloc_size, op->sample_size, op->stack_id, op->ts);
  }
}

static void apply_free(struct hs_tracker *t, const struct hs_op *op) {
  struct hs_live *e = hs_live_find(&t->live, op->addr);
  if (!e) {
    t->st.untracked_frees++;
    if (t->stream) stream_row(t, HS_OP_FREE, op->seq, op->addr, 0, 0, 0, 0);
    return;
  }
  book_free(t, e, op->ts);
  series_free(t, e, op);
  if (t->stream) {
    stream_row(t, HS_OP_FREE, op->seq, op->addr, e->alloc_size, e->sample_size,
               t->stacks.ids[live_stack(t, e)], 0);
  }
  hs_live_remove(&t->live, e);
}

static inline void apply(struct hs_tracker *t, const struct hs_op *op) {
  if (op->kind == HS_OP_MALLOC)
    apply_malloc(t, op);
  else
    apply_free(t, op);
}

/* Apply the pending ops whose turn has come. */
static void commit_ready(struct hs_tracker *t) {
  struct hs_pending *p = &t->pending;
  while (p->n > 0 && p->heap[0].seq <= t->committed_seq + 1) {
    struct hs_op op;
    hs_pending_pop(p, &op);
    if (op.seq <= t->committed_seq) {
      t->st.late_records++; /* a duplicate of an op applied meanwhile */
    } else {
      t->committed_seq = op.seq;
    }
    apply(t, &op);
  }
}

static inline void submit(struct hs_tracker *t, const struct hs_op *op, uint64_t now_ns) {
  if (op->seq <= t->committed_seq) {
    t->st.late_records++;
    apply(t, op);
  } else if (op->seq == t->committed_seq + 1) {
    t->committed_seq = op->seq;
    apply(t, op);
    if (t->pending.n > 0) commit_ready(t);
  } else {
    if (hs_pending_push(&t->pending, op, now_ns) < 0) {
      t->oom = 1;
      return;
    }
    if (t->pending.n > t->st.max_pending) t->st.max_pending = t->pending.n;
  }
}

void hs_tracker_malloc(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t alloc_size,
                       uint64_t sample_size, uint64_t stack_id, uint64_t ts, uint32_t tid, uint64_t now_ns) {
  struct hs_op op = {seq, addr, sample_size, alloc_size, stack_id, ts, HS_OP_MALLOC, tid, 0, 0};
  submit(t, &op, now_ns);
}

void hs_tracker_malloc_labelled(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t alloc_size,
                                uint64_t sample_size, uint64_t stack_id, uint64_t ts, uint32_t tid,
                                uint32_t label_set, uint64_t now_ns) {
  struct hs_op op = {seq, addr, sample_size, alloc_size, stack_id, ts, HS_OP_MALLOC, tid, label_set, 0};
  submit(t, &op, now_ns);
}

void hs_tracker_free(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t now_ns) {
  hs_tracker_free_at(t, seq, addr, 0, now_ns);
}

void hs_tracker_free_at(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t ts, uint64_t now_ns) {
  struct hs_op op = {seq, addr, 0, 0, 0, ts, HS_OP_FREE, 0, 0, 0};
  submit(t, &op, now_ns);
}

/* Give up on the missing seqs before the next pending op, then apply. */
static void skip_gap(struct hs_tracker *t) {
  uint64_t next = t->pending.heap[0].seq;
  if (next > t->committed_seq + 1) {
    t->st.gaps_skipped += next - 1 - t->committed_seq;
    t->committed_seq = next - 1;
  }
  commit_ready(t);
}

void hs_tracker_expire(struct hs_tracker *t, uint64_t now_ns) {
  for (;;) {
    uint64_t oldest = hs_pending_oldest(&t->pending, t->committed_seq);
    if (t->pending.n == 0 || now_ns < oldest || now_ns - oldest <= HS_GAP_TIMEOUT_NS) return;
    skip_gap(t);
  }
}

void hs_tracker_flush(struct hs_tracker *t) {
  while (t->pending.n > 0) skip_gap(t);
  hs_pending_oldest(&t->pending, t->committed_seq); /* empties the fifo */
}

/* ---- callsites ---- */

int hs_tracker_set_callsite(struct hs_tracker *t, uint64_t stack_id, uint64_t callsite_id) {
  if (callsite_id == 0) return 0;
  struct hs_stack_slot *s = hs_stacks_get(&t->stacks, stack_id);
  struct hs_stack_slot *c = s ? hs_stacks_get(&t->callsites, callsite_id) : NULL;
  if (!c) return -1;
  if (c->bucket == HS_NO_BUCKET) {
    int64_t b = bucket_new(t, callsite_id, 0);
    if (b < 0) return -1;
    c->bucket = (uint32_t)b;
  }
  if (s->bucket == HS_NO_BUCKET) {
    s->bucket = c->bucket;
    return 0;
  }
  if (t->rest[s->bucket].callsite_id != 0) return 0; /* it has one already */
  /* Fold the stack's bucket into the callsite's, peak and window start states included. */
  struct hs_bucket *from = &t->buckets[s->bucket], *to = &t->buckets[c->bucket];
  struct hs_totals peak_to = at_peak(t, c->bucket), peak_from = at_peak(t, s->bucket);
  struct hs_totals start_to = window_start_of(t, c->bucket), start_from = window_start_of(t, s->bucket);
  totals_add(&to->cur, &from->cur);
  totals_add(&peak_to, &peak_from);
  t->rest[c->bucket].at_peak = peak_to;
  to->epoch = t->pk->peak_epoch;
  from->cur = (struct hs_totals){0};
  from->into_plus1 = c->bucket + 1;
  from->epoch = t->pk->peak_epoch;
  t->rest[s->bucket].at_peak = (struct hs_totals){0};
  if (t->pk->win_epoch) {
    /* Both now changed in the window (their epoch): their start states are win_start's. */
    totals_add(&start_to, &start_from);
    t->win_start[c->bucket] = start_to;
    t->win_start[s->bucket] = (struct hs_totals){0};
  }
  s->bucket = c->bucket;
  return 0;
}

/* ---- rows ---- */

static void *out_rows(struct hs_tracker *t, size_t n, size_t row_size) {
  t->out.len = 0;
  if (hs_buf_reserve(&t->out, n * row_size + 1) < 0) return NULL;
  return t->out.p;
}

int64_t hs_tracker_dump(struct hs_tracker *t) {
  struct hs_dump_row *row = out_rows(t, 2 * t->nbuckets, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < t->nbuckets; i++) {
    struct hs_bucket_rest *b = &t->rest[i];
    if (b->callsite_id == 0) continue;
    struct hs_totals now = t->buckets[i].cur;
    if (t->dump_at_max) {
      /* heapprofd's dump_at_max: the rows are the unreleased state at the
       * peak, so their sum up to this dump is the peak. */
      struct hs_totals p = at_peak(t, i);
      now = (struct hs_totals){p.alloc_bytes - p.free_bytes, 0, p.alloc_count - p.free_count, 0,
                               p.alloc_real - p.free_real, 0};
    }
    const struct hs_totals *d = &b->dumped;
    if (now.alloc_count != d->alloc_count || now.alloc_bytes != d->alloc_bytes) {
      *row++ = (struct hs_dump_row){b->callsite_id, (int64_t)(now.alloc_count - d->alloc_count),
                                    (int64_t)(now.alloc_bytes - d->alloc_bytes),
                                    (int64_t)(now.alloc_real - d->alloc_real)};
    }
    if (now.free_count != d->free_count || now.free_bytes != d->free_bytes) {
      *row++ = (struct hs_dump_row){b->callsite_id, (int64_t)(d->free_count - now.free_count),
                                    (int64_t)(d->free_bytes - now.free_bytes),
                                    (int64_t)(d->free_real - now.free_real)};
    }
    b->dumped = now;
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

int64_t hs_tracker_peak(struct hs_tracker *t) {
  if (t->pk->best_unfreed > t->pk->max_unfreed) {
    /* An earlier window held the process's peak. */
    t->out.len = 0;
    if (hs_buf_reserve(&t->out, t->best.len + 1) < 0) return -1;
    memcpy(t->out.p, t->best.p, t->best.len);
    t->out.len = t->best.len;
    return (int64_t)(t->best.len / sizeof(struct hs_peak_row));
  }
  struct hs_peak_row *row = out_rows(t, t->nbuckets, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < t->nbuckets; i++) {
    const struct hs_bucket_rest *b = &t->rest[i];
    if (b->callsite_id == 0) continue;
    struct hs_totals p = at_peak(t, i);
    if (p.alloc_count == 0 && p.alloc_bytes == 0) continue;
    *row++ = (struct hs_peak_row){b->callsite_id, p.alloc_count - p.free_count, p.alloc_bytes - p.free_bytes,
                                  p.alloc_count, p.alloc_bytes, p.alloc_real - p.free_real, p.alloc_real};
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

/* ---- peak windows ---- */

/* Keep t's rows at the peak as its best (the closing window held the process's peak). */
static int keep_best(struct hs_tracker *t) {
  int64_t n = hs_tracker_peak(t);
  if (n < 0) return -1;
  struct hs_buf keep = {0};
  if (hs_buf_reserve(&keep, t->out.len + 1) < 0) return -1;
  memcpy(keep.p, t->out.p, t->out.len);
  keep.len = t->out.len;
  free(t->best.p);
  t->best = keep;
  return 0;
}

int hs_tracker_new_window(struct hs_tracker *t) {
  struct hs_peak *pk = t->pk;
  if (pk->max_unfreed > pk->best_unfreed) {
    /* The closing window holds the process's peak so far: keep every member's rows. */
    for (uint32_t m = 0; m < pk->n; m++)
      if (keep_best(pk->members[m]) < 0) return -1;
    pk->best_unfreed = pk->max_unfreed;
    pk->best_ts = pk->max_ts;
  }
  uint64_t last_ts = 0;
  for (uint32_t m = 0; m < pk->n; m++) {
    struct hs_tracker *x = pk->members[m];
    /* Room for every bucket's start state (once: the buckets made later get theirs
     * in bucket_new); nothing is copied, as each bucket's cur is its state now. */
    if (window_cover(x, x->nbuckets) < 0) return -1;
    if (x->last_ts > last_ts) last_ts = x->last_ts;
  }
  pk->win_base = pk->cur_unfreed;
  pk->max_unfreed = pk->cur_unfreed;
  pk->max_ts = last_ts;
  /* Every bucket's cur is now its state at the (window's) peak and at the window's
   * start: a bucket's epoch below win_epoch says it has not changed since. */
  pk->peak_epoch++;
  pk->win_epoch = pk->peak_epoch;
  return 0;
}

int64_t hs_tracker_window(struct hs_tracker *t) {
  struct hs_window_row *row = out_rows(t, t->nbuckets, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < t->nbuckets; i++) {
    const struct hs_bucket *b = &t->buckets[i];
    if (b->into_plus1) continue;
    struct hs_totals s = window_start_of(t, i);
    struct hs_totals p = at_peak(t, i), c = b->cur;
    if (c.alloc_count == s.alloc_count && c.free_count == s.free_count) continue;
    uint64_t callsite_id = t->rest[i].callsite_id;
    uint64_t stack_id = callsite_id ? 0 : t->stacks.ids[b->stack_idx];
    int64_t held = (int64_t)(s.alloc_bytes - s.free_bytes), held_n = (int64_t)(s.alloc_count - s.free_count);
    *row++ = (struct hs_window_row){callsite_id, stack_id,
                                    (int64_t)(p.alloc_bytes - p.free_bytes) - held,
                                    (int64_t)(p.alloc_count - p.free_count) - held_n,
                                    (int64_t)(c.alloc_bytes - c.free_bytes) - held,
                                    (int64_t)(c.alloc_count - c.free_count) - held_n,
                                    c.alloc_bytes - s.alloc_bytes};
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

uint64_t hs_tracker_process_peak(const struct hs_tracker *t, uint64_t *ts) {
  const struct hs_peak *pk = t->pk;
  if (pk->best_unfreed > pk->max_unfreed) {
    if (ts) *ts = pk->best_ts;
    return pk->best_unfreed;
  }
  if (ts) *ts = pk->max_ts;
  return pk->max_unfreed;
}

int64_t hs_tracker_totals(struct hs_tracker *t) {
  struct hs_totals_row *row = out_rows(t, t->nbuckets, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < t->nbuckets; i++) {
    const struct hs_bucket *b = &t->buckets[i];
    if (b->into_plus1) continue;
    uint64_t callsite_id = t->rest[i].callsite_id;
    uint64_t stack_id = callsite_id ? 0 : t->stacks.ids[b->stack_idx];
    *row++ = (struct hs_totals_row){callsite_id, stack_id, b->cur.alloc_bytes, b->cur.free_bytes,
                                    b->cur.alloc_count, b->cur.free_count, b->cur.alloc_real,
                                    b->cur.free_real};
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

int64_t hs_tracker_live(struct hs_tracker *t) {
  struct hs_live_row *row = out_rows(t, t->live.count, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i <= t->live.mask; i++) {
    const struct hs_live *e = &t->live.slots[i];
    if (!e->bucket_plus1) continue;
    *row++ = (struct hs_live_row){e->addr, e->sample_size, e->alloc_size,
                                  t->stacks.ids[live_stack(t, e)], e->seq};
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

int64_t hs_tracker_unresolved(struct hs_tracker *t) {
  uint64_t *row = out_rows(t, t->nbuckets, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < t->nbuckets; i++) {
    const struct hs_bucket *b = &t->buckets[i];
    if (t->rest[i].callsite_id == 0 && !b->into_plus1) *row++ = t->stacks.ids[b->stack_idx];
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

int64_t hs_tracker_threads(struct hs_tracker *t) {
  /* Keys past thread_cap (a growth that failed) booked nothing. */
  size_t n = !t->threads ? 0 : t->thread_keys.count < t->thread_cap ? t->thread_keys.count : t->thread_cap;
  struct hs_thread_row *row = out_rows(t, n, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < n; i++) {
    const uint64_t key = t->thread_keys.ids[i];
    const struct hs_totals *x = &t->thread_totals[i];
    const uint64_t stack_id = t->stacks.ids[(uint32_t)key];
    /* The stack's bucket is its callsite's once folded (rest.callsite_id), its own before (0). */
    const struct hs_stack_slot *s = hs_stacks_get(&t->stacks, stack_id); /* there: no add */
    const uint64_t callsite_id = s && s->bucket != HS_NO_BUCKET ? t->rest[s->bucket].callsite_id : 0;
    *row++ = (struct hs_thread_row){callsite_id, stack_id, key >> 32, x->alloc_bytes, x->free_bytes,
                                    x->alloc_count, x->free_count, x->alloc_real, x->free_real};
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

uint64_t hs_tracker_sampled_bytes(const struct hs_tracker *t) { return t->alloc_bytes; }

/* ---- life cycle ---- */

int hs_tracker_init(struct hs_tracker *t, int stream, int dump_at_max) {
  memset(t, 0, sizeof *t);
  t->stream = stream;
  t->dump_at_max = dump_at_max;
  t->pk = calloc(1, sizeof *t->pk);
  if (t->pk) {
    t->pk->members[0] = t;
    t->pk->n = 1;
  }
  if (!t->pk || hs_live_init(&t->live, HS_LIVE_INITIAL) < 0 || hs_stacks_init(&t->stacks, HS_STACKS_INITIAL) < 0 ||
      hs_stacks_init(&t->callsites, HS_CALLSITES_INITIAL) < 0 || hs_pending_init(&t->pending) < 0 ||
      hs_series_init(&t->series) < 0 || hs_lifetimes_init(&t->lt) < 0) {
    hs_tracker_destroy(t);
    return -1;
  }
  return 0;
}

int hs_tracker_keep_threads(struct hs_tracker *t) {
  if (t->threads) return 0;
  /* Live entries made before would hold stack indices, not key indices. */
  if (t->nbuckets || t->pending.n || t->committed_seq) return -1;
  if (hs_stacks_init(&t->thread_keys, HS_STACKS_INITIAL) < 0) return -1;
  t->threads = 1;
  return 0;
}

/* t out of its peak group; the group freed with its last member. */
static void leave_peak(struct hs_tracker *t) {
  struct hs_peak *pk = t->pk;
  if (!pk) return;
  t->pk = NULL;
  for (uint32_t m = 0; m < pk->n; m++) {
    if (pk->members[m] == t) {
      pk->members[m] = pk->members[--pk->n];
      break;
    }
  }
  /* What it holds leaves the sum; its share of the peak stays in the others' figures. */
  pk->cur_unfreed -= t->cur_unfreed < pk->cur_unfreed ? t->cur_unfreed : pk->cur_unfreed;
  if (pk->n == 0) free(pk);
}

int hs_tracker_share_peak(struct hs_tracker *t, struct hs_tracker *with) {
  struct hs_peak *pk = with->pk;
  if (!t->pk || !pk) return -1;
  if (t->pk == pk) return 0;
  if (t->pk->n != 1 || pk->n >= HS_PEAK_MEMBERS) return -1;
  /* Its buckets' epochs and its window are of its own peak until now: only before any op. */
  if (t->nbuckets || t->pending.n || t->committed_seq || t->cur_unfreed) return -1;
  free(t->pk);
  t->pk = pk;
  pk->members[pk->n++] = t;
  return 0;
}

void hs_tracker_destroy(struct hs_tracker *t) {
  leave_peak(t);
  if (t->threads) hs_stacks_destroy(&t->thread_keys);
  free(t->thread_totals);
  t->thread_totals = NULL;
  t->thread_cap = 0;
  t->threads = 0;
  hs_labels_destroy(t->labels);
  t->labels = NULL;
  hs_live_destroy(&t->live);
  hs_stacks_destroy(&t->stacks);
  hs_stacks_destroy(&t->callsites);
  hs_pending_destroy(&t->pending);
  hs_series_destroy(&t->series);
  hs_lifetimes_destroy(&t->lt);
  free(t->buckets);
  free(t->rest);
  free(t->stream_rows.p);
  free(t->out.p);
  free(t->win_start);
  free(t->best.p);
  t->win_start = NULL;
  t->win_n = 0;
  t->best = (struct hs_buf){0};
  t->buckets = NULL;
  t->rest = NULL;
  t->nbuckets = t->buckets_cap = 0;
  t->stream_rows = (struct hs_buf){0};
  t->out = (struct hs_buf){0};
}
