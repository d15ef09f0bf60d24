/* ingest_core.c: ring reading and record validation; the ops go to the tracker. */
#include "ingest_core.h"

#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire format and the packed outputs are little endian"
#endif

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

/* A STACK, MODULE, HEAP, custom heap, PYCODE or PYINFO record, copied out of
 * the ring: is its body sane? (codec.decode_record checks the Python tails again.) */
static int rare_record_ok(uint32_t type, const uint8_t *rec, uint32_t size) {
  const uint8_t *body = rec + 8;
  uint64_t body_size = size - 8;
  switch (type) {
    case HS_REC_STACK:
      return hs_resolver_record_ok(body, body_size);
    case HS_REC_PYCODE: {
      struct hs_pycode c;
      if (body_size < sizeof c) return 0;
      memcpy(&c, body, sizeof c);
      return sizeof c + (uint64_t)c.name_len + c.file_len + c.table_len <= body_size;
    }
    case HS_REC_PYINFO: {
      struct hs_pyinfo i;
      if (body_size < sizeof i) return 0;
      memcpy(&i, body, sizeof i);
      return sizeof i + (uint64_t)i.status_len <= body_size;
    }
    case HS_REC_MODULE: {
      struct hs_module m;
      if (body_size < sizeof m) return 0;
      memcpy(&m, body, sizeof m);
      return m.build_id_len <= HS_BUILD_ID_MAX && sizeof m + (uint64_t)m.path_len <= body_size;
    }
    case HS_REC_HEAP:
      return body_size >= sizeof(struct hs_heap);
    /* Custom heaps go to Python: their trackers are made there (producer.py). */
    case HS_REC_HEAP_MALLOC: {
      struct hs_heap_malloc m;
      if (body_size != sizeof m) return 0;
      memcpy(&m, body, sizeof m);
      return m.sample_size <= HS_MAX_SAMPLE_SIZE && m.alloc_size <= HS_MAX_SAMPLE_SIZE;
    }
    case HS_REC_HEAP_FREE:
      return body_size == sizeof(struct hs_heap_free);
    case HS_REC_LABELSET: {
      struct hs_labelset l;
      if (body_size < sizeof l) return 0;
      memcpy(&l, body, sizeof l);
      return l.text_len <= HS_LABEL_TEXT_MAX && sizeof l + (uint64_t)l.text_len <= body_size;
    }
    default:
      return 0;
  }
}

/* Framing checks on write_pos (a local copy). 0 when the ring is corrupt. */
static int write_pos_ok(const struct hs_ingest *g, uint64_t wp) {
  return (wp & 7) == 0 && wp >= g->read_pos && wp - g->read_pos <= g->ring_size;
}

struct hs_ingest_route *hs_ingest_route(struct hs_ingest *g, uint32_t heap_id) {
  for (uint32_t i = 0; i < g->nroutes; i++)
    if (g->routes[i].heap_id == heap_id) return &g->routes[i];
  if (g->nroutes >= HS_INGEST_MAX_ROUTES) return NULL;
  struct hs_ingest_route *r = &g->routes[g->nroutes++];
  memset(r, 0, sizeof *r);
  r->heap_id = heap_id;
  return r;
}

static struct hs_ingest_route *route_of(struct hs_ingest *g, uint32_t heap_id) {
  for (uint32_t i = 0; i < g->nroutes; i++)
    if (g->routes[i].heap_id == heap_id && g->routes[i].tracker) return &g->routes[i];
  return NULL;
}

/* A record's ts as CLOCK_MONOTONIC ns (ingest_core.h: the TSC clock). */
static inline uint64_t ts_of(const struct hs_ingest *g, uint64_t ts) {
  return g->tsc ? hs_tsc_ns(&g->cal, ts) : ts;
}

/* A HEAP_MALLOC / HEAP_FREE of a routed heap, applied here: 1; else 0 (it
 * goes to Python). body: the record's body in the ring (copied first). */
static int routed(struct hs_ingest *g, uint32_t type, const uint8_t *body, uint64_t now_ns) {
  if (type == HS_REC_HEAP_MALLOC) {
    struct hs_heap_malloc m;
    memcpy(&m, body, sizeof m);
    struct hs_ingest_route *r = route_of(g, m.heap_id);
    if (!r) return 0;
    if (m.sample_size > HS_MAX_SAMPLE_SIZE || m.alloc_size > HS_MAX_SAMPLE_SIZE) {
      g->st.malformed_records++; /* as a MALLOC's */
      return 1;
    }
    r->mallocs++;
    hs_tracker_malloc_labelled(r->tracker, m.seq, m.addr, m.alloc_size, m.sample_size, m.stack_id,
                               ts_of(g, m.ts), 0,
                               m.label_set, now_ns);
    return 1;
  }
  struct hs_heap_free f;
  memcpy(&f, body, sizeof f);
  struct hs_ingest_route *r = route_of(g, f.heap_id);
  if (!r) return 0;
  r->frees++;
  hs_tracker_free_at(r->tracker, f.seq, f.addr, ts_of(g, f.ts), now_ns);
  return 1;
}

static int rare(uint32_t type) {
  return type == HS_REC_STACK || type == HS_REC_MODULE || type == HS_REC_HEAP || type == HS_REC_HEAP_MALLOC ||
         type == HS_REC_HEAP_FREE || type == HS_REC_PYCODE || type == HS_REC_PYINFO || type == HS_REC_LABELSET;
}

/* One rare record at `rec` in the ring (its header hdr, read once): copied out first, then
 * the copy checked, as the client may still scribble on the ring. A STACK is kept by the
 * process's resolver; the others are left in g->records for Python. -1 on ENOMEM (the
 * record is not consumed). */
static int take_rare(struct hs_ingest *g, uint32_t type, const uint8_t *rec, uint64_t hdr, uint32_t size) {
  if (hs_buf_reserve(&g->records, size) < 0) return -1;
  uint8_t *copy = g->records.p + g->records.len;
  memcpy(copy, rec, size);
  memcpy(copy, &hdr, 8);
  if (!rare_record_ok(type, copy, size)) {
    g->st.malformed_records++;
  } else if (type == HS_REC_STACK) {
    if (hs_resolver_keep(g->resolver, copy, size) < 0) return -1;
    g->st.held_stacks++;
  } else {
    g->records.len += size;
    g->records_count++;
  }
  return 0;
}

/* Reads what the ring holds, in order, up to max_records. Long on purpose: the
 * per-record loop of the producer, with malloc's record handled inline and each
 * check of a corrupt ring next to the read it guards. */
void hs_ingest_drain(struct hs_ingest *g, uint64_t max_records, uint64_t now_ns) {
  g->records.len = 0;
  g->records_count = 0;
  if (g->corrupt) {
    /* Nothing more will be read, but what waits still times out. */
    hs_tracker_expire(g->tracker, now_ns);
    return;
  }
  const uint64_t mask = g->ring_size - 1;
  uint64_t rp = g->read_pos;
  uint64_t published = rp;
  uint64_t wp = __atomic_load_n(&g->meta->write_pos, __ATOMIC_ACQUIRE);
  uint64_t n = 0;
  int module_taken = 0;

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
      if (m.sample_size > HS_MAX_SAMPLE_SIZE || m.alloc_size > HS_MAX_SAMPLE_SIZE) {
        g->st.malformed_records++; /* sizes no real process has, that would wrap the sums */
      } else {
        g->st.mallocs++;
        hs_tracker_malloc_labelled(g->tracker, m.seq, m.addr, m.alloc_size, m.sample_size, m.stack_id,
                                   ts_of(g, m.ts), m.tid,
                                   m.label_set, now_ns);
      }
    } else if (type == HS_REC_FREE && size == 8 + sizeof(struct hs_free)) {
      struct hs_free f;
      memcpy(&f, rec + 8, sizeof f);
      g->st.frees++;
      hs_tracker_free_at(g->tracker, f.seq, f.addr, ts_of(g, f.ts), now_ns);
    } else if (g->nroutes &&
               ((type == HS_REC_HEAP_MALLOC && size == 8 + sizeof(struct hs_heap_malloc)) ||
                (type == HS_REC_HEAP_FREE && size == 8 + sizeof(struct hs_heap_free))) &&
               routed(g, type, rec + 8, now_ns)) {
      /* applied to the heap's own tracker */
    } else if (type == HS_REC_PAD) {
      g->st.pads++;
    } else if (type == HS_REC_STACK && module_taken) {
      /* A MODULE came before it: Python applies that first (a library loaded where an
       * unloaded one was resolves the stacks before it by the old one), and the next
       * drain starts here. */
      break;
    } else if (rare(type)) {
      module_taken |= type == HS_REC_MODULE;
      if (take_rare(g, type, rec, hdr, size) < 0) {
        g->oom = 1;
        break;
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
    if (g->oom || g->tracker->oom) break;
  }
  g->st.records += n;
  g->read_pos = rp;
  publish(g);
  hs_tracker_expire(g->tracker, now_ns);
}

/* ---- life cycle ---- */

void hs_ingest_init(struct hs_ingest *g, void *map, uint64_t ring_size, struct hs_tracker *tracker,
                    struct hs_resolver *resolver) {
  memset(g, 0, sizeof *g);
  g->meta = map;
  g->data = (uint8_t *)map + HS_META_SIZE;
  g->ring_size = ring_size;
  g->tracker = tracker;
  g->resolver = resolver;
  g->read_pos = __atomic_load_n(&g->meta->read_pos, __ATOMIC_ACQUIRE);
  g->zeroed_to = g->read_pos;
  if (g->read_pos & 7) g->corrupt = 1;
}

void hs_ingest_destroy(struct hs_ingest *g) {
  free(g->records.p);
  g->records = (struct hs_buf){0};
}
