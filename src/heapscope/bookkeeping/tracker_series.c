/* tracker_series.c: a heap's memory over time and its kept samples (tracker_series.h). */
#include "tracker_series.h"

#include <stdlib.h>
#include <string.h>

#include "tracker.h"

#define HS_SERIES_INITIAL 64u
#define HS_FREED_INITIAL 256u

int hs_series_init(struct hs_series *s) {
  memset(s, 0, sizeof *s);
  /* Room for a first point always: hs_series_note writes the open point without a check. */
  s->pts = calloc(HS_SERIES_INITIAL, sizeof *s->pts);
  if (!s->pts) return -1;
  s->cap = HS_SERIES_INITIAL;
  s->open = s->pts;
  s->step = HS_SERIES_STEP_NS;
  return 0;
}

void hs_series_destroy(struct hs_series *s) {
  free(s->pts);
  free(s->freed);
  memset(s, 0, sizeof *s);
}

/* Neighbours in pairs, each pair one point: the first's ts and seq, the larger
 * unreleased, the second's end and allocated (the later). The step doubles with it. */
static void merge_pairs(struct hs_series *s) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < s->n; i += 2, k++) {
    struct hs_series_point p = s->pts[i];
    if (i + 1 < s->n) {
      const struct hs_series_point *q = &s->pts[i + 1];
      if (q->unreleased > p.unreleased) p.unreleased = q->unreleased;
      p.end = q->end;
      p.allocated = q->allocated;
    }
    s->pts[k] = p;
  }
  s->n = k;
  s->step *= 2;
}

void hs_series_open(struct hs_series *s, uint64_t ts, uint64_t seq) {
  if (s->n > 0 && s->n == s->cap) {
    uint32_t cap = s->cap * 2;
    struct hs_series_point *p = cap <= HS_SERIES_CAP ? realloc(s->pts, cap * sizeof *p) : NULL;
    if (p) {
      s->pts = p;
      s->cap = cap;
    } else {
      merge_pairs(s); /* full, or no memory for more: coarser, never lost */
    }
  }
  /* A new point starts where the last left off: its unreleased is at least the last's end,
   * which is not known apart from its max, so it starts at 0 and the op's own value sets it. */
  uint64_t allocated = s->n ? s->pts[s->n - 1].allocated : 0;
  s->pts[s->n++] = (struct hs_series_point){ts, seq, 0, 0, allocated};
  s->open = &s->pts[s->n - 1];
  /* After a merge the open point may span more: the points stay evenly fine. */
  s->span_end = ts + s->step;
}

void hs_series_keep_freed(struct hs_series *s, uint64_t alloc_seq, uint64_t size, uint32_t bucket) {
  if (s->nfreed == s->freed_cap) {
    uint32_t cap = s->freed_cap ? s->freed_cap * 2 : HS_FREED_INITIAL;
    struct hs_freed_sample *f = cap <= HS_SAMPLES_CAP ? realloc(s->freed, cap * sizeof *f) : NULL;
    if (f) {
      s->freed = f;
      s->freed_cap = cap;
    } else if (s->thin < 63) {
      /* Full (or no memory): keep half, by one more bit of the hash; each kept stands for twice as many. */
      s->thin++;
      uint32_t k = 0;
      for (uint32_t i = 0; i < s->nfreed; i++)
        if (hs_series_kept(s, s->freed[i].alloc_seq)) s->freed[k++] = s->freed[i];
      s->nfreed = k;
      if (!hs_series_kept(s, alloc_seq)) return;
    }
    if (s->nfreed == s->freed_cap) return; /* nothing to grow and nothing thinned out */
  }
  s->freed[s->nfreed++] = (struct hs_freed_sample){alloc_seq, s->last_ts, size, bucket, 0};
}

uint64_t hs_series_ts_of_seq(const struct hs_series *s, uint64_t seq) {
  if (s->n == 0) return 0;
  uint32_t lo = 0, hi = s->n; /* the last point with pts.seq <= seq is in [lo, hi) */
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (s->pts[mid].seq <= seq)
      lo = mid;
    else
      hi = mid;
  }
  return s->pts[lo].ts;
}

/* ---- rows ---- */

static void *out_rows(struct hs_tracker *t, size_t n, size_t row_size) {
  t->out.len = 0;
  if (hs_buf_reserve(&t->out, n * row_size + 1) < 0) return NULL;
  return t->out.p;
}

int64_t hs_tracker_series(struct hs_tracker *t) {
  const struct hs_series *s = &t->series;
  struct hs_series_row *row = out_rows(t, s->n, sizeof *row), *first = row;
  if (!row) return -1;
  for (uint32_t i = 0; i < s->n; i++)
    *row++ = (struct hs_series_row){s->pts[i].ts, s->pts[i].unreleased, s->pts[i].end, s->pts[i].allocated};
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

/* The samples a row set keeps: those kept now, freed and live, thinned further (a larger
 * `thin`) while there are more than HS_SAMPLES_OUT, as a program that never frees would
 * otherwise give a row for every live sample. A sample is kept at every thin up to the
 * leading zeros of its hash, so one pass counts them for every thin. */
static uint32_t out_thin(const struct hs_tracker *t) {
  const struct hs_series *s = &t->series;
  uint64_t at[66] = {0}; /* samples whose hash has this many leading zeros (64: all) */
  for (uint32_t i = 0; i < s->nfreed; i++) {
    uint64_t h = s->freed[i].alloc_seq * 0x9e3779b97f4a7c15ull;
    at[h ? __builtin_clzll(h) : 64]++;
  }
  for (size_t i = 0; i <= t->live.mask; i++) {
    const struct hs_live *e = &t->live.slots[i];
    if (!e->bucket_plus1) continue;
    uint64_t h = e->seq * 0x9e3779b97f4a7c15ull;
    at[h ? __builtin_clzll(h) : 64]++;
  }
  uint64_t kept = 0; /* kept at thin k: those with at least k leading zeros */
  for (uint32_t k = 0; k <= 64; k++) kept += at[k];
  uint32_t thin = 0;
  for (; thin < 63 && (thin < s->thin || kept > HS_SAMPLES_OUT); thin++) kept -= at[thin];
  return thin;
}

/* A sample row booked in bucket b: its callsite's, or its stack's while it has none. */
static struct hs_sample_row sample_row(const struct hs_tracker *t, uint32_t b, uint64_t alloc_seq,
                                       uint64_t free_ts, uint64_t size, uint64_t weight) {
  while (t->buckets[b].into_plus1) b = t->buckets[b].into_plus1 - 1; /* folded into its callsite's since */
  const uint64_t callsite_id = t->rest[b].callsite_id;
  const uint64_t stack_id = callsite_id ? 0 : t->stacks.ids[t->buckets[b].stack_idx];
  return (struct hs_sample_row){callsite_id, stack_id, hs_series_ts_of_seq(&t->series, alloc_seq), free_ts, size,
                                weight};
}

int64_t hs_tracker_samples(struct hs_tracker *t) {
  struct hs_series s = t->series; /* a copy, thinned for the rows */
  s.thin = out_thin(t);
  const uint64_t weight = 1ull << s.thin;
  struct hs_sample_row *row = out_rows(t, s.nfreed + t->live.count, sizeof *row), *first = row;
  if (!row) return -1;
  for (uint32_t i = 0; i < s.nfreed; i++) {
    const struct hs_freed_sample *f = &s.freed[i];
    if (hs_series_kept(&s, f->alloc_seq)) *row++ = sample_row(t, f->bucket, f->alloc_seq, f->free_ts, f->size, weight);
  }
  for (size_t i = 0; i <= t->live.mask; i++) {
    const struct hs_live *e = &t->live.slots[i];
    if (!e->bucket_plus1 || !hs_series_kept(&s, e->seq)) continue;
    *row++ = sample_row(t, e->bucket_plus1 - 1, e->seq, HS_NOT_FREED, e->sample_size, weight);
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}
