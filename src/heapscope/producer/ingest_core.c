/* ingest_core.c: ring reading, record validation, seq ordering, bookkeeping. */
#include "ingest_core.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire format and the packed outputs are little endian"
#endif

#define HS_LIVE_INITIAL 1024
#define HS_STACKS_INITIAL 256

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- growable byte buffer ---- */

static int buf_reserve(struct hs_buf *b, size_t more) {
  if (b->cap - b->len >= more) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < more) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

/* ---- applying ops ---- */

static void stream_row(struct hs_ingest *g, uint64_t kind, uint64_t seq, uint64_t addr,
                       uint64_t alloc_size, uint64_t sample_size, uint64_t stack_id, uint64_t ts) {
  if (buf_reserve(&g->stream_rows, sizeof(struct hs_stream_row)) < 0) {
    g->oom = 1;
    return;
  }
  struct hs_stream_row row = {kind, seq, addr, alloc_size, sample_size, stack_id, ts};
  memcpy(g->stream_rows.p + g->stream_rows.len, &row, sizeof row);
  g->stream_rows.len += sizeof row;
}

/* ---- dump_at_max ---- */

static int peak_reserve(struct hs_ingest *g, size_t idx) {
  if (idx < g->peak_cap) return 0;
  size_t cap = g->peak_cap ? g->peak_cap : 256;
  while (cap <= idx) cap *= 2;
  struct hs_peak_row *p = realloc(g->peak, cap * sizeof *p);
  if (!p) return -1;
  memset(p + g->peak_cap, 0, (cap - g->peak_cap) * sizeof *p);
  g->peak = p;
  g->peak_cap = cap;
  return 0;
}

static void peak_add(struct hs_ingest *g, uint32_t idx, uint64_t bytes, uint64_t ts) {
  struct hs_peak_row *r = &g->peak[idx];
  r->cur_bytes += bytes;
  r->cur_count++;
  g->cur_unfreed += bytes;
  if (g->cur_unfreed <= g->max_unfreed) return;
  if (g->peak_clean) {
    r->max_bytes = r->cur_bytes;
    r->max_count = r->cur_count;
  } else {
    for (size_t i = 0; i < g->stacks.count; i++) {
      g->peak[i].max_bytes = g->peak[i].cur_bytes;
      g->peak[i].max_count = g->peak[i].cur_count;
    }
    g->peak_clean = 1;
  }
  g->max_unfreed = g->cur_unfreed;
  g->max_ts = ts;
}

static void peak_sub(struct hs_ingest *g, uint32_t idx, uint64_t bytes) {
  struct hs_peak_row *r = &g->peak[idx];
  r->cur_bytes -= bytes;
  r->cur_count--;
  g->cur_unfreed -= bytes;
  g->peak_clean = 0;
}

static void book_free(struct hs_ingest *g, const struct hs_live *e) {
  struct hs_stack_totals *t = &g->stacks.totals[e->stack_idx];
  t->free_bytes += e->sample_size;
  t->free_count++;
  if (g->dump_at_max) peak_sub(g, e->stack_idx, e->sample_size);
}

static void apply_malloc(struct hs_ingest *g, const struct hs_op *op) {
  if (hs_live_reserve(&g->live) < 0) {
    g->oom = 1;
    return;
  }
  int64_t idx = hs_stacks_index(&g->stacks, op->stack_id);
  if (idx < 0 || (g->dump_at_max && peak_reserve(g, (size_t)idx) < 0)) {
    g->oom = 1;
    return;
  }
  struct hs_live *e = hs_live_slot(&g->live, op->addr);
  if (e->used) {
    /* Its free was never seen (or not yet: then it will count as untracked). */
    book_free(g, e);
    g->st.implicit_frees++;
  } else {
    e->used = 1;
    e->addr = op->addr;
    g->live.count++;
  }
  e->seq = op->seq;
  e->sample_size = op->sample_size;
  e->alloc_size = op->alloc_size;
  e->stack_idx = (uint32_t)idx;
  struct hs_stack_totals *t = &g->stacks.totals[idx];
  t->alloc_bytes += op->sample_size;
  t->alloc_count++;
  if (g->dump_at_max) peak_add(g, (uint32_t)idx, op->sample_size, op->ts);
  if (op->ts > g->last_ts) g->last_ts = op->ts;
  if (g->stream) {
    stream_row(g, HS_REC_MALLOC, op->seq, op->addr, op->alloc_size, op->sample_size, op->stack_id,
               op->ts);
  }
}

static void apply_free(struct hs_ingest *g, const struct hs_op *op) {
  struct hs_live *e = hs_live_find(&g->live, op->addr);
  if (!e) {
    g->st.untracked_frees++;
    if (g->stream) stream_row(g, HS_REC_FREE, op->seq, op->addr, 0, 0, 0, 0);
    return;
  }
  book_free(g, e);
  if (g->stream) {
    stream_row(g, HS_REC_FREE, op->seq, op->addr, e->alloc_size, e->sample_size,
               g->stacks.totals[e->stack_idx].stack_id, 0);
  }
  hs_live_remove(&g->live, e);
}

static inline void apply(struct hs_ingest *g, const struct hs_op *op) {
  if (op->kind == HS_REC_MALLOC)
    apply_malloc(g, op);
  else
    apply_free(g, op);
}

/* Apply the pending ops whose turn has come. */
static void commit_ready(struct hs_ingest *g) {
  struct hs_pending *p = &g->pending;
  while (p->n > 0 && p->heap[0].seq <= g->committed_seq + 1) {
    struct hs_op op;
    hs_pending_pop(p, &op);
    if (op.seq <= g->committed_seq) {
      g->st.late_records++; /* a duplicate of an op applied meanwhile */
    } else {
      g->committed_seq = op.seq;
    }
    apply(g, &op);
  }
}

static void submit(struct hs_ingest *g, const struct hs_op *op, uint64_t t_ns) {
  if (op->seq <= g->committed_seq) {
    g->st.late_records++;
    apply(g, op);
  } else if (op->seq == g->committed_seq + 1) {
    g->committed_seq = op->seq;
    apply(g, op);
    if (g->pending.n > 0) commit_ready(g);
  } else {
    if (hs_pending_push(&g->pending, op, t_ns) < 0) {
      g->oom = 1;
      return;
    }
    if (g->pending.n > g->st.max_pending) g->st.max_pending = g->pending.n;
  }
}

/* Give up on the missing seqs before the next pending op, then apply. */
static void skip_gap(struct hs_ingest *g) {
  uint64_t next = g->pending.heap[0].seq;
  if (next > g->committed_seq + 1) {
    g->st.gaps_skipped += next - 1 - g->committed_seq;
    g->committed_seq = next - 1;
  }
  commit_ready(g);
}

static void skip_timed_out_gaps(struct hs_ingest *g, uint64_t t_ns) {
  for (;;) {
    uint64_t oldest = hs_pending_oldest(&g->pending, g->committed_seq);
    if (g->pending.n == 0 || t_ns - oldest <= HS_GAP_TIMEOUT_NS) return;
    skip_gap(g);
  }
}

void hs_ingest_flush(struct hs_ingest *g) {
  while (g->pending.n > 0) skip_gap(g);
  hs_pending_oldest(&g->pending, g->committed_seq); /* empties the fifo */
}

/* ---- reading the ring ---- */

/* Zero the consumed bytes, then let writers reuse them. */
static void publish(struct hs_ingest *g) {
  uint64_t mask = g->ring_size - 1;
  while (g->zeroed_to < g->read_pos) {
    uint64_t off = g->zeroed_to & mask;
    uint64_t len = g->read_pos - g->zeroed_to;
    if (len > g->ring_size - off) len = g->ring_size - off;
    memset(g->data + off, 0, len);
    g->zeroed_to += len;
  }
  __atomic_store_n(&g->meta->read_pos, g->read_pos, __ATOMIC_RELEASE);
}

/* A STACK, MODULE or HEAP record, copied out of the ring: is its body sane? */
static int rare_record_ok(uint32_t type, const uint8_t *rec, uint32_t size) {
  const uint8_t *body = rec + 8;
  uint64_t body_size = size - 8;
  switch (type) {
    case HS_REC_STACK: {
      struct hs_stack s;
      if (body_size < sizeof s) return 0;
      memcpy(&s, body, sizeof s);
      return s.depth <= HS_MAX_FRAMES && sizeof s + 8ull * s.depth <= body_size;
    }
    case HS_REC_MODULE: {
      struct hs_module m;
      if (body_size < sizeof m) return 0;
      memcpy(&m, body, sizeof m);
      return m.build_id_len <= HS_BUILD_ID_MAX && sizeof m + (uint64_t)m.path_len <= body_size;
    }
    case HS_REC_HEAP:
      return body_size >= sizeof(struct hs_heap);
    default:
      return 0;
  }
}

/* Framing checks on write_pos (a local copy). 0 when the ring is corrupt. */
static int write_pos_ok(const struct hs_ingest *g, uint64_t wp) {
  return (wp & 7) == 0 && wp >= g->read_pos && wp - g->read_pos <= g->ring_size;
}

void hs_ingest_drain(struct hs_ingest *g, uint64_t max_records) {
  g->records.len = 0;
  g->records_count = 0;
  const uint64_t t_ns = now_ns();
  if (g->corrupt) {
    /* Nothing more will be read, but what waits still times out. */
    skip_timed_out_gaps(g, t_ns);
    return;
  }
  const uint64_t mask = g->ring_size - 1;
  uint64_t rp = g->read_pos;
  uint64_t published = rp;
  uint64_t wp = __atomic_load_n(&g->meta->write_pos, __ATOMIC_ACQUIRE);
  uint64_t n = 0;

  for (;;) {
    if (max_records && n >= max_records) break;
    if (rp == wp) {
      wp = __atomic_load_n(&g->meta->write_pos, __ATOMIC_ACQUIRE);
      if (rp == wp) break;
    }
    if (!write_pos_ok(g, wp)) {
      g->corrupt = 1;
      break;
    }
    const uint64_t off = rp & mask;
    const uint8_t *rec = g->data + off;
    const uint64_t hdr = __atomic_load_n((const uint64_t *)rec, __ATOMIC_ACQUIRE);
    if (hdr == 0) break; /* reserved, not yet written: keep FIFO order */
    const uint32_t size = HS_RECORD_SIZE(hdr), type = HS_RECORD_TYPE(hdr);
    if (size < 8 || (size & 7) || size > wp - rp || off + size > g->ring_size) {
      g->corrupt = 1;
      break;
    }

    if (type == HS_REC_MALLOC && size == 8 + sizeof(struct hs_malloc)) {
      struct hs_malloc m;
      memcpy(&m, rec + 8, sizeof m);
      struct hs_op op = {m.seq, m.addr, m.sample_size, m.alloc_size, m.stack_id, m.ts, HS_REC_MALLOC, 0};
      g->st.mallocs++;
      submit(g, &op, t_ns);
    } else if (type == HS_REC_FREE && size == 8 + sizeof(struct hs_free)) {
      struct hs_free f;
      memcpy(&f, rec + 8, sizeof f);
      struct hs_op op = {f.seq, f.addr, 0, 0, 0, 0, HS_REC_FREE, 0};
      g->st.frees++;
      submit(g, &op, t_ns);
    } else if (type == HS_REC_PAD) {
      g->st.pads++;
    } else if (type == HS_REC_STACK || type == HS_REC_MODULE || type == HS_REC_HEAP) {
      /* Copy first, then validate the copy: the client may still scribble. */
      if (buf_reserve(&g->records, size) < 0) {
        g->oom = 1;
        break;
      }
      uint8_t *copy = g->records.p + g->records.len;
      memcpy(copy, rec, size);
      memcpy(copy, &hdr, 8);
      if (rare_record_ok(type, copy, size)) {
        g->records.len += size;
        g->records_count++;
      } else {
        g->st.malformed_records++;
      }
    } else {
      g->st.malformed_records++; /* unknown type, or MALLOC/FREE of the wrong size */
    }

    rp += size;
    n++;
    if (rp - published >= HS_PUBLISH_BYTES) {
      g->read_pos = rp;
      publish(g);
      published = rp;
    }
    if (g->oom) break;
  }
  g->st.records += n;
  g->read_pos = rp;
  publish(g);
  skip_timed_out_gaps(g, t_ns);
}

/* ---- life cycle ---- */

int hs_ingest_init(struct hs_ingest *g, void *map, uint64_t ring_size, int stream,
                   int dump_at_max) {
  memset(g, 0, sizeof *g);
  g->dump_at_max = dump_at_max;
  g->peak_clean = 1;
  g->meta = map;
  g->data = (uint8_t *)map + HS_META_SIZE;
  g->ring_size = ring_size;
  g->stream = stream;
  g->read_pos = __atomic_load_n(&g->meta->read_pos, __ATOMIC_ACQUIRE);
  g->zeroed_to = g->read_pos;
  if (g->read_pos & 7) g->corrupt = 1;
  if (hs_live_init(&g->live, HS_LIVE_INITIAL) < 0 || hs_stacks_init(&g->stacks, HS_STACKS_INITIAL) < 0 ||
      hs_pending_init(&g->pending) < 0) {
    hs_ingest_destroy(g);
    return -1;
  }
  return 0;
}

void hs_ingest_destroy(struct hs_ingest *g) {
  hs_live_destroy(&g->live);
  hs_stacks_destroy(&g->stacks);
  hs_pending_destroy(&g->pending);
  free(g->stream_rows.p);
  free(g->records.p);
  free(g->peak);
  g->peak = NULL;
  g->peak_cap = 0;
  g->stream_rows = (struct hs_buf){0};
  g->records = (struct hs_buf){0};
}
