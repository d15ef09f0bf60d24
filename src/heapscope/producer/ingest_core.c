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
    case HS_REC_STACK: {
      struct hs_stack s;
      if (body_size < sizeof s) return 0;
      memcpy(&s, body, sizeof s);
      if (s.depth > HS_MAX_FRAMES || sizeof s + 8ull * s.depth > body_size) return 0;
      if (!(s.flags & HS_STACK_PYTHON)) return 1;
      uint64_t at = sizeof s + 8ull * s.depth;
      struct hs_pystack ps;
      if (at + sizeof ps > body_size) return 0;
      memcpy(&ps, body + at, sizeof ps);
      return ps.py_depth <= HS_MAX_PYFRAMES &&
             at + sizeof ps + (uint64_t)ps.py_depth * sizeof(struct hs_pyframe) <= body_size;
    }
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
    default:
      return 0;
  }
}

/* ---- held stacks ---- */

static size_t held_slot(const struct hs_held_stacks *h, uint64_t stack_id) {
  size_t i = (size_t)hs_mix64(stack_id) & h->mask;
  while (h->offs_plus1[i] && h->ids[i] != stack_id) i = (i + 1) & h->mask;
  return i;
}

/* Grow the index to twice its capacity (16 slots at first). -1 on ENOMEM. */
static int held_grow(struct hs_held_stacks *h) {
  size_t cap = h->mask ? (h->mask + 1) * 2 : 16;
  uint64_t *ids = calloc(cap, sizeof *ids), *offs = calloc(cap, sizeof *offs);
  if (!ids || !offs) {
    free(ids);
    free(offs);
    return -1;
  }
  struct hs_held_stacks bigger = {h->arena, ids, offs, cap - 1, h->count};
  for (size_t i = 0; h->mask && i <= h->mask; i++) {
    if (!h->offs_plus1[i]) continue;
    size_t j = held_slot(&bigger, h->ids[i]);
    ids[j] = h->ids[i];
    offs[j] = h->offs_plus1[i];
  }
  free(h->ids);
  free(h->offs_plus1);
  *h = bigger;
  return 0;
}

/* Keep one validated STACK record (header included). -1 on ENOMEM. */
static int held_add(struct hs_held_stacks *h, const uint8_t *rec, uint32_t size) {
  if ((h->count + 1) * 8 > (h->mask ? h->mask + 1 : 0) * 5 && held_grow(h) < 0) return -1;
  if (hs_buf_reserve(&h->arena, size) < 0) return -1;
  uint64_t stack_id;
  memcpy(&stack_id, rec + 8, sizeof stack_id); /* struct hs_stack begins with it */
  size_t off = h->arena.len;
  memcpy(h->arena.p + off, rec, size);
  h->arena.len += size;
  size_t i = held_slot(h, stack_id);
  if (!h->offs_plus1[i]) h->count++;
  h->ids[i] = stack_id;
  h->offs_plus1[i] = (uint64_t)off + 1;
  return 0;
}

/* A validated STACK record, kept to be resolved (resolve_stacks). A stack
 * already resolved keeps its callsite (dump.py define_stack); one defined
 * again while it waits waits as last defined. -1 on ENOMEM. */
static int keep_stack(struct hs_ingest *g, const uint8_t *rec, uint32_t size) {
  struct hs_stack s;
  memcpy(&s, rec + 8, sizeof s);
  uint64_t cs;
  if (hs_map_get(&g->res.callsites, s.stack_id, 0, &cs)) return 0;
  uint32_t old_size;
  int waiting = hs_ingest_held_stack(g, s.stack_id, &old_size) != NULL;
  if (held_add(&g->held, rec, size) < 0) return -1;
  if (waiting) return 0;
  return hs_u64s_push(s.flags & HS_STACK_PYTHON ? &g->res.python : &g->res.native, s.stack_id);
}

int hs_ingest_compact_held(struct hs_ingest *g) {
  struct hs_held_stacks *h = &g->held;
  if (!g->resolve_stacks || h->count == g->res.native.len + g->res.python.len + g->res.parked.len) return 0;
  struct hs_held_stacks kept = {0};
  const struct hs_u64s *lists[3] = {&g->res.parked, &g->res.native, &g->res.python};
  for (int l = 0; l < 3; l++) {
    for (size_t n = 0; n < lists[l]->len; n++) {
      uint32_t size;
      const uint8_t *rec = hs_ingest_held_stack(g, lists[l]->p[n], &size);
      if (rec && held_add(&kept, rec, size) < 0) {
        free(kept.arena.p);
        free(kept.ids);
        free(kept.offs_plus1);
        return -1;
      }
    }
  }
  free(h->arena.p);
  free(h->ids);
  free(h->offs_plus1);
  *h = kept;
  return 0;
}

const uint8_t *hs_ingest_held_stack(const struct hs_ingest *g, uint64_t stack_id, uint32_t *size) {
  const struct hs_held_stacks *h = &g->held;
  if (!h->count) return NULL;
  size_t i = held_slot(h, stack_id);
  if (!h->offs_plus1[i]) return NULL;
  const uint8_t *rec = h->arena.p + (h->offs_plus1[i] - 1);
  uint64_t hdr;
  memcpy(&hdr, rec, sizeof hdr);
  *size = HS_RECORD_SIZE(hdr);
  return rec;
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
    hs_tracker_malloc(r->tracker, m.seq, m.addr, m.alloc_size, m.sample_size, m.stack_id, m.ts, 0, now_ns);
    return 1;
  }
  struct hs_heap_free f;
  memcpy(&f, body, sizeof f);
  struct hs_ingest_route *r = route_of(g, f.heap_id);
  if (!r) return 0;
  r->frees++;
  hs_tracker_free(r->tracker, f.seq, f.addr, now_ns);
  return 1;
}

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
        hs_tracker_malloc(g->tracker, m.seq, m.addr, m.alloc_size, m.sample_size, m.stack_id, m.ts, m.tid,
                          now_ns);
      }
    } else if (type == HS_REC_FREE && size == 8 + sizeof(struct hs_free)) {
      struct hs_free f;
      memcpy(&f, rec + 8, sizeof f);
      g->st.frees++;
      hs_tracker_free(g->tracker, f.seq, f.addr, now_ns);
    } else if (g->nroutes &&
               ((type == HS_REC_HEAP_MALLOC && size == 8 + sizeof(struct hs_heap_malloc)) ||
                (type == HS_REC_HEAP_FREE && size == 8 + sizeof(struct hs_heap_free))) &&
               routed(g, type, rec + 8, now_ns)) {
      /* applied to the heap's own tracker */
    } else if (type == HS_REC_PAD) {
      g->st.pads++;
    } else if (type == HS_REC_STACK || type == HS_REC_MODULE || type == HS_REC_HEAP ||
               type == HS_REC_HEAP_MALLOC || type == HS_REC_HEAP_FREE ||
               type == HS_REC_PYCODE || type == HS_REC_PYINFO) {
      /* Copy first, then validate the copy: the client may still scribble. */
      if (hs_buf_reserve(&g->records, size) < 0) {
        g->oom = 1;
        break;
      }
      uint8_t *copy = g->records.p + g->records.len;
      memcpy(copy, rec, size);
      memcpy(copy, &hdr, 8);
      if (!rare_record_ok(type, copy, size)) {
        g->st.malformed_records++;
      } else if (type == HS_REC_STACK && (g->hold_stacks || g->resolve_stacks)) {
        if ((g->resolve_stacks ? keep_stack(g, copy, size) : held_add(&g->held, copy, size)) < 0) {
          g->oom = 1;
          break;
        }
        g->st.held_stacks++;
      } else {
        g->records.len += size;
        g->records_count++;
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

void hs_ingest_init(struct hs_ingest *g, void *map, uint64_t ring_size, struct hs_tracker *tracker) {
  memset(g, 0, sizeof *g);
  g->meta = map;
  g->data = (uint8_t *)map + HS_META_SIZE;
  g->ring_size = ring_size;
  g->tracker = tracker;
  g->read_pos = __atomic_load_n(&g->meta->read_pos, __ATOMIC_ACQUIRE);
  g->zeroed_to = g->read_pos;
  if (g->read_pos & 7) g->corrupt = 1;
}

void hs_ingest_destroy(struct hs_ingest *g) {
  free(g->records.p);
  g->records = (struct hs_buf){0};
  free(g->held.arena.p);
  free(g->held.ids);
  free(g->held.offs_plus1);
  g->held = (struct hs_held_stacks){0};
  hs_resolver_destroy(&g->res);
}
