/*
 * tracker_series.h: one heap's memory over time, kept by its tracker as ops
 * are applied (tracker.c calls hs_series_note on every malloc and free).
 *
 *   ops (ts, sampled unreleased, sampled allocated)
 *      --> points   one per span of HS_SERIES_STEP_NS of activity: the span's
 *                   first ts and seq, its largest unreleased, its unreleased
 *                   and allocated at its end. At HS_SERIES_CAP points, neighbours merge in
 *                   pairs (the larger unreleased kept: the peak is never
 *                   lost) and the step doubles, so a long run keeps at most
 *                   HS_SERIES_CAP points, evenly fine.
 *      --> freed    one record per freed sample: its malloc's seq, the
 *                   free's ts, its bytes and its bucket; a sample is kept
 *                   when the top `thin` bits of a hash of its seq are zero
 *                   (all at first); at HS_SAMPLES_CAP records `thin` grows
 *                   by one and half of them go. A kept record stands for
 *                   2^thin samples, so sums stay unbiased, and the live
 *                   samples are kept by the same test at the end (more bits
 *                   when freed and live are over HS_SAMPLES_OUT together).
 *
 * What an op pays: a compare with the open span's end, a max and a store
 * (the point), and for a free one hash and an append. A new span, a merge
 * and a thinning are out of line. The series' clock is the ops' own ts (the
 * client's at the malloc and at the sent free: the TSC or CLOCK_MONOTONIC,
 * wire.h HS_CFG_TSC); a free without one (tracker.c hs_tracker_free) or
 * dated before the heap's latest op counts at that op's time.
 *
 * A sample's malloc time is read from the points (the last span whose first
 * seq is not after its seq): exact to a span, which is what the flamegraph's
 * range selection needs, and no per-allocation state.
 *
 * NB: not thread-safe; the tracker's caller serialises calls.
 */
#ifndef HEAPSCOPE_TRACKER_SERIES_H
#define HEAPSCOPE_TRACKER_SERIES_H

#include <stddef.h>
#include <stdint.h>

#define HS_SERIES_STEP_NS 10000000ull /* 10 ms: the finest span */
#define HS_SERIES_CAP 4096u           /* points per heap, at most */
#define HS_SAMPLES_CAP 16384u         /* freed-sample records per heap, at most (512 KiB) */
#define HS_SAMPLES_OUT 32768u         /* sample rows per heap (freed and live), at most */

struct hs_series_point {
  uint64_t ts;         /* the span's first op's ts (ns) */
  uint64_t seq;        /* ... and seq */
  uint64_t unreleased; /* the span's largest sampled unreleased bytes */
  uint64_t end;        /* ... at its end (a drop shows though the largest stays) */
  uint64_t allocated;  /* sampled bytes allocated in all, at the span's end */
};

struct hs_freed_sample {
  uint64_t alloc_seq;
  uint64_t free_ts;
  uint64_t size;   /* sampled bytes */
  uint32_t bucket; /* the tracker's bucket it was booked in */
  uint32_t unused;
};

struct hs_series {
  struct hs_series_point *pts;
  struct hs_series_point *open; /* pts + n - 1: what an op writes */
  uint32_t n, cap;
  uint64_t step;     /* the span of a point now (ns) */
  uint64_t span_end; /* ops before this ts go in the open point, pts[n - 1] */
  uint64_t last_ts;  /* the open point's latest op ts */
  struct hs_freed_sample *freed;
  uint32_t nfreed, freed_cap;
  uint32_t thin; /* a sample is kept when the top `thin` bits of its hash are zero */
};

/* ---- rows handed to Python (mirrored in bookkeeping/rows.py) ---- */

/* hs_tracker_series(): one point, oldest first. */
struct hs_series_row {
  uint64_t ts;
  uint64_t unreleased; /* largest in the span */
  uint64_t end;        /* at the span's end */
  uint64_t allocated;
};

#define HS_NOT_FREED UINT64_MAX

/* hs_tracker_samples(): one kept sample, freed or live. A callsite's,
 * or a stack's whose callsite is not known yet (callsite_id 0). */
struct hs_sample_row {
  uint64_t callsite_id;
  uint64_t stack_id;
  uint64_t alloc_ts;
  uint64_t free_ts; /* HS_NOT_FREED: live */
  uint64_t size;    /* sampled bytes */
  uint64_t weight;  /* samples it stands for (2^thin) */
};

int hs_series_init(struct hs_series *s);
void hs_series_destroy(struct hs_series *s);

/* Out of line: open a new point at ts (merging when full). */
void hs_series_open(struct hs_series *s, uint64_t ts, uint64_t seq);
/* Out of line: a kept freed sample, appended when there is no room left (growing or thinning). */
void hs_series_keep_freed(struct hs_series *s, uint64_t alloc_seq, uint64_t size, uint32_t bucket);

/* Kept: the top `thin` bits of seq * 2^64/phi are zero (Fibonacci hashing: one multiply). The
 * fractions of k/phi are evenly spread for any run of seqs and any step through them, so a
 * program's periodic pattern of allocations is kept at the same rate as the rest; and a seq
 * kept at thin + 1 is kept at thin, so a thinning only ever drops. */
static inline int hs_series_kept(const struct hs_series *s, uint64_t seq) {
  return seq * 0x9e3779b97f4a7c15ull <= (UINT64_MAX >> s->thin);
}

/* An op at ts (a malloc's; a free passes s->last_ts) leaving the heap at these totals. */
static inline void hs_series_note(struct hs_series *s, uint64_t ts, uint64_t seq, uint64_t unreleased,
                                  uint64_t allocated) {
  if (__builtin_expect(ts >= s->span_end, 0)) hs_series_open(s, ts, seq);
  struct hs_series_point *p = s->open;
  if (unreleased > p->unreleased) p->unreleased = unreleased;
  p->end = unreleased;
  p->allocated = allocated;
  if (ts > s->last_ts) s->last_ts = ts;
}

/* A free at ts (0 or earlier than the heap's latest op: at that op's time), leaving the
 * heap at `unreleased`: lower than before, so the span's largest stays, and allocated too. */
static inline void hs_series_note_free(struct hs_series *s, uint64_t ts, uint64_t seq, uint64_t unreleased) {
  if (__builtin_expect(ts > s->last_ts, 0)) {
    s->last_ts = ts;
    if (ts >= s->span_end) {
      hs_series_open(s, ts, seq);
      s->open->unreleased = unreleased;
    }
  }
  s->open->end = unreleased;
}

/* A sample freed now (at s->last_ts): kept when the thinning says so. */
static inline void hs_series_freed(struct hs_series *s, uint64_t alloc_seq, uint64_t size, uint32_t bucket) {
  if (!hs_series_kept(s, alloc_seq)) return;
  if (__builtin_expect(s->nfreed < s->freed_cap, 1))
    s->freed[s->nfreed++] = (struct hs_freed_sample){alloc_seq, s->last_ts, size, bucket, 0};
  else
    hs_series_keep_freed(s, alloc_seq, size, bucket);
}

/* The ts of the span a seq fell in (the first point's for seqs before it). */
uint64_t hs_series_ts_of_seq(const struct hs_series *s, uint64_t seq);

/* Each fills t->out with rows and returns their count; -1 on ENOMEM. */
struct hs_tracker;
int64_t hs_tracker_series(struct hs_tracker *t);  /* hs_series_row, oldest first */
int64_t hs_tracker_samples(struct hs_tracker *t); /* hs_sample_row: the kept freed, then the kept live */

#endif /* HEAPSCOPE_TRACKER_SERIES_H */
