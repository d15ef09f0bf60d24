/* resolve_core.c: the maps, the trie and the resolve of resolve_core.h. */
#include "resolve_core.h"

#include <stdlib.h>
#include <string.h>

#include "ingest_core.h"
#include "tracker_tables.h"

/* client/pyframes.h HS_PY_FRAME_ENTRY (codec.PY_FRAME_ENTRY): the outermost frame of its activation. */
#define PY_FRAME_ENTRY 1u

/* ---- maps ---- */

static size_t map_slot(const struct hs_map *m, uint64_t a, uint64_t b) {
  size_t i = (size_t)hs_mix64(a ^ hs_mix64(b)) & m->mask;
  while (m->slots[i].val && (m->slots[i].a != a || m->slots[i].b != b)) i = (i + 1) & m->mask;
  return i;
}

/* Four times the capacity up to 2^18 slots (6 MiB), twice beyond (64 slots at first): a
   compiler's trie grows to ~10^5 nodes, and each growth moves every slot (moving them took
   as long as all the lookups of its resolve); beyond, a map is never more than twice the
   size doubling would make it. -1 on ENOMEM. */
static int map_grow(struct hs_map *m) {
  size_t cap = m->mask ? (m->mask + 1) * (m->mask < (1u << 16) ? 4 : 2) : 64;
  struct hs_map bigger = {calloc(cap, sizeof(struct hs_map_slot)), cap - 1, m->count};
  if (!bigger.slots) return -1;
  for (size_t i = 0; m->mask && i <= m->mask; i++) {
    if (!m->slots[i].val) continue;
    /* The keys are distinct: the first free slot from the key's own. */
    size_t j = (size_t)hs_mix64(m->slots[i].a ^ hs_mix64(m->slots[i].b)) & bigger.mask;
    while (bigger.slots[j].val) j = (j + 1) & bigger.mask;
    bigger.slots[j] = m->slots[i];
  }
  free(m->slots);
  *m = bigger;
  return 0;
}

int hs_map_put(struct hs_map *m, uint64_t a, uint64_t b, uint64_t value) {
  if ((m->count + 1) * 4 > (m->mask ? m->mask + 1 : 0) * 3 && map_grow(m) < 0) return -1; /* load <= 3/4 */
  size_t i = map_slot(m, a, b);
  if (!m->slots[i].val) m->count++;
  m->slots[i] = (struct hs_map_slot){a, b, value + 1};
  return 0;
}

int hs_map_get(const struct hs_map *m, uint64_t a, uint64_t b, uint64_t *value) {
  if (!m->count) return 0;
  size_t i = map_slot(m, a, b);
  if (!m->slots[i].val) return 0;
  *value = m->slots[i].val - 1;
  return 1;
}

void hs_map_destroy(struct hs_map *m) {
  free(m->slots);
  *m = (struct hs_map){0};
}

int hs_u64s_push(struct hs_u64s *v, uint64_t x) {
  if (v->len == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 256;
    uint64_t *p = realloc(v->p, cap * sizeof *p);
    if (!p) return -1;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->len++] = x;
  return 0;
}

/* ---- the trie ---- */

int64_t hs_trie_child(struct hs_trie *t, uint32_t parent, uint32_t frame) {
  uint64_t id;
  if (hs_map_get(&t->nodes, parent, frame, &id)) return (int64_t)id;
  if (t->count >= UINT32_MAX - 1) return -1;
  if (t->count == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    uint32_t *p = realloc(t->parent, cap * sizeof *p), *f = p ? realloc(t->frame, cap * sizeof *f) : NULL;
    if (p) t->parent = p;
    if (f) t->frame = f;
    uint32_t *d = f ? realloc(t->depth, cap * sizeof *d) : NULL;
    if (!d) return -1;
    t->depth = d;
    t->cap = cap;
  }
  id = t->count + 1;
  if (hs_map_put(&t->nodes, parent, frame, id) < 0) return -1;
  t->parent[t->count] = parent;
  t->frame[t->count] = frame;
  t->depth[t->count] = parent ? t->depth[parent - 1] + 1 : 0;
  t->count++;
  return (int64_t)id;
}

void hs_trie_destroy(struct hs_trie *t) {
  hs_map_destroy(&t->nodes);
  free(t->parent);
  free(t->frame);
  free(t->depth);
  *t = (struct hs_trie){0};
}

/* ---- resolving ---- */

void hs_resolver_destroy(struct hs_resolver *r) {
  hs_map_destroy(&r->pcs);
  hs_map_destroy(&r->pyframes);
  hs_map_destroy(&r->codes);
  hs_map_destroy(&r->callsites);
  free(r->native.p);
  free(r->python.p);
  free(r->parked.p);
  free(r->path);
  *r = (struct hs_resolver){0};
}

/* Outcomes of one stack. */
#define RESOLVED 1
#define WAITS 0
#define PARKS 2 /* waits for a module: a pc was answered "not now" */
#define FAILED (-1)

struct job {
  struct hs_resolver *r;
  hs_namer namer;
  void *ctx;
  size_t n; /* frames in r->path, leaf first */
  uint32_t *prev_frame, *prev_node; /* the previous callsite's path, root first (callsite_of_path) */
  size_t prev_len, prev_cap;
};

static int push(struct job *j, uint64_t fid) {
  struct hs_resolver *r = j->r;
  if (j->n == r->path_cap) {
    size_t cap = r->path_cap ? r->path_cap * 2 : 512;
    uint32_t *p = realloc(r->path, cap * sizeof *p);
    if (!p) return -2;
    r->path = p;
    r->path_cap = cap;
  }
  /* The filtered flag rides in bit 31 of the scratch copy: frame ids stay below 2^31. */
  if ((uint32_t)fid >= 0x80000000u || (fid >> 32 & ~3ull)) return -2;
  r->path[j->n++] = (uint32_t)fid | (fid & HS_FID_FILTERED ? 0x80000000u : 0);
  return 0;
}

static int64_t pc_frame(struct job *j, uint64_t pc) {
  uint64_t fid;
  if (hs_map_get(&j->r->pcs, pc, 0, &fid)) return (int64_t)fid;
  int64_t named = j->namer(j->ctx, HS_NAME_PC, pc, 0);
  if (named <= 0) return named < 0 ? -1 : 0; /* 0: not now, the stack waits */
  if (hs_map_put(&j->r->pcs, pc, 0, (uint64_t)named) < 0) return -2;
  return named;
}

static int known_code(const struct hs_resolver *r, uint64_t key) {
  uint64_t v;
  return hs_map_get(&r->codes, key, 0, &v);
}

/* Python's frame of (key, lasti): cached when its code object is known. */
static int64_t py_frame(struct job *j, uint64_t key, int32_t lasti) {
  uint64_t fid;
  if (hs_map_get(&j->r->pyframes, key, (uint32_t)lasti, &fid)) return (int64_t)fid;
  int64_t named = j->namer(j->ctx, HS_NAME_PYFRAME, key, lasti);
  if (named < 0) return -1;
  if (!(named & HS_FID_NOCACHE) && known_code(j->r, key) &&
      hs_map_put(&j->r->pyframes, key, (uint32_t)lasti, (uint64_t)named) < 0)
    return -2;
  return named;
}

/* A frame id could not be had: -1 (the namer's error stands) or -2 (ENOMEM). */
#define CHECK(x) \
  do { \
    if ((x) < 0) return (x) == -1 ? FAILED : -2; \
  } while (0)

/* The frames of a stack without Python frames, leaf first in j->path (frames_of). */
static int native_path(struct job *j, const uint64_t *pcs, uint32_t depth) {
  for (uint32_t k = depth; k-- > 0;) { /* root first: the namer is asked in the Python path's order */
    uint64_t pc;
    memcpy(&pc, &pcs[k], sizeof pc);
    int64_t fid = pc_frame(j, pc);
    CHECK(fid);
    if (!fid) return PARKS;
    CHECK(push(j, (uint64_t)fid));
  }
  /* Built root first: turn it leaf first, as the Python path's before its reversal. */
  for (size_t a = 0, b = j->n ? j->n - 1 : 0; a < b; a++, b--) {
    uint32_t t = j->r->path[a];
    j->r->path[a] = j->r->path[b];
    j->r->path[b] = t;
  }
  return RESOLVED;
}

/* frames_of_python: each Python frame where its eval activation is, leaf first in j->path. */
static int python_path(struct job *j, const uint64_t *pcs, uint32_t depth, const uint8_t *pyf, uint32_t py_depth,
                       const struct hs_splice *sp, uint64_t *unplaced) {
  uint32_t i = 0;
  int seen = 0;
  for (uint32_t k = 0; k < depth; k++) {
    uint64_t pc;
    memcpy(&pc, &pcs[k], sizeof pc);
    if (sp->eval_lo < pc && pc <= sp->eval_hi) {
      seen = 1;
      while (i < py_depth) {
        struct hs_pyframe f;
        memcpy(&f, pyf + (size_t)i * sizeof f, sizeof f);
        i++;
        uint64_t fid;
        if (!hs_map_get(&j->r->pyframes, f.code_key, (uint32_t)f.lasti, &fid)) {
          if (sp->wait && f.code_key && !known_code(j->r, f.code_key)) return WAITS;
          int64_t named = py_frame(j, f.code_key, f.lasti);
          CHECK(named);
          fid = (uint64_t)named;
        }
        CHECK(push(j, fid));
        if (f.flags & PY_FRAME_ENTRY) break;
      }
      continue;
    }
    if (seen && sp->interp_start <= pc - 1 && pc - 1 < sp->interp_end) continue;
    int64_t fid = pc_frame(j, pc);
    CHECK(fid);
    if (!fid) return PARKS;
    CHECK(push(j, (uint64_t)fid));
  }
  if (i < py_depth) {
    for (uint32_t k = i; sp->wait && k < py_depth; k++) {
      struct hs_pyframe f;
      memcpy(&f, pyf + (size_t)k * sizeof f, sizeof f);
      if (f.code_key && !known_code(j->r, f.code_key)) return WAITS;
    }
    *unplaced += py_depth - i;
    for (; i < py_depth; i++) {
      struct hs_pyframe f;
      memcpy(&f, pyf + (size_t)i * sizeof f, sizeof f);
      int64_t fid = py_frame(j, f.code_key, f.lasti);
      CHECK(fid);
      CHECK(push(j, (uint64_t)fid));
    }
  }
  return RESOLVED;
}

/* The callsite of j->path (leaf first), filtered runs collapsed; > 0, or < 0 as CHECK.
 *
 * Stacks that follow one another share most of their root end (a parser's
 * recursion, a test runner's frames): the nodes of the previous path are
 * kept (prev, root first), and its common part with this one is not looked
 * up again. The trie is shared by every process: prev is this resolve's only. */
static int64_t callsite_of_path(struct job *j, struct hs_trie *trie) {
  struct hs_resolver *r = j->r;
  if (!j->n) {
    if (!r->no_frames) {
      int64_t fid = j->namer(j->ctx, HS_NAME_NO_FRAMES, 0, 0);
      if (fid < 0) return -1;
      r->no_frames = (uint64_t)fid;
    }
    CHECK(push(j, r->no_frames));
  }
  if (j->prev_cap < j->n) {
    size_t cap = j->n * 2;
    uint32_t *f = realloc(j->prev_frame, cap * sizeof *f);
    if (f) j->prev_frame = f;
    uint32_t *nd = f ? realloc(j->prev_node, cap * sizeof *nd) : NULL;
    if (!nd) return -2;
    j->prev_node = nd;
    j->prev_cap = cap;
  }
  size_t k = 0, same = 0;
  int64_t node = 0;
  uint32_t last = 0;
  for (size_t at = j->n; at-- > 0;) { /* root first */
    uint32_t f = r->path[at];
    if (node && f == last && (f & 0x80000000u)) continue;
    last = f;
    if (k == same && k < j->prev_len && j->prev_frame[k] == f) {
      node = j->prev_node[k];
      same++;
    } else {
      node = hs_trie_child(trie, (uint32_t)node, f & 0x7fffffffu);
      if (node < 0) return -2;
      j->prev_frame[k] = f;
      j->prev_node[k] = (uint32_t)node;
    }
    k++;
  }
  j->prev_len = k;
  return node;
}

int64_t hs_ingest_resolve(struct hs_ingest *g, struct hs_trie *trie, const struct hs_splice *sp, hs_namer namer,
                          void *ctx, uint64_t *unplaced) {
  struct hs_resolver *r = &g->res;
  struct job j = {r, namer, ctx, 0, NULL, NULL, 0, 0};
  int64_t resolved = 0;
  int failed = 0;
  struct hs_u64s parked = r->parked, again = {0};
  if (sp->retry_parked) {
    again = parked; /* tried first; whatever parks again parks anew */
    r->parked = (struct hs_u64s){0};
  }
  struct hs_u64s *lists[3] = {&again, &r->native, &r->python};
  for (int l = 0; l < 3; l++) {
    struct hs_u64s *ids = lists[l];
    size_t kept = 0;
    for (size_t n = 0; n < ids->len; n++) {
      uint64_t stack_id = ids->p[n];
      if (failed) {
        if (l == 0) {
          if (hs_u64s_push(&r->parked, stack_id) < 0) failed = -2;
          continue;
        }
        ids->p[kept++] = stack_id;
        continue;
      }
      uint32_t size;
      const uint8_t *rec = hs_ingest_held_stack(g, stack_id, &size);
      if (!rec) continue; /* cannot happen: a waiting stack is held */
      struct hs_stack s;
      memcpy(&s, rec + 8, sizeof s);
      const uint64_t *pcs = (const uint64_t *)(rec + 8 + sizeof s);
      j.n = 0;
      int outcome;
      if (s.flags & HS_STACK_PYTHON) {
        struct hs_pystack ps;
        const uint8_t *at = rec + 8 + sizeof s + 8ull * s.depth;
        memcpy(&ps, at, sizeof ps);
        uint64_t more = 0;
        outcome = python_path(&j, pcs, s.depth, at + sizeof ps, ps.py_depth, sp, &more);
        if (outcome == RESOLVED) *unplaced += more;
      } else {
        outcome = native_path(&j, pcs, s.depth);
      }
      int64_t cs = outcome == RESOLVED ? callsite_of_path(&j, trie) : outcome;
      if (outcome == PARKS || (l == 0 && outcome == WAITS)) {
        if (hs_u64s_push(&r->parked, stack_id) < 0) failed = -2;
        continue;
      }
      if (outcome == WAITS) {
        ids->p[kept++] = stack_id;
        continue;
      }
      if (cs < 0 || hs_map_put(&r->callsites, stack_id, 0, (uint64_t)cs) < 0 ||
          hs_tracker_set_callsite(g->tracker, stack_id, (uint64_t)cs) < 0) {
        failed = cs == -1 ? -1 : -2;
        if (l == 0) {
          if (hs_u64s_push(&r->parked, stack_id) < 0) failed = -2;
          continue;
        }
        ids->p[kept++] = stack_id;
        continue;
      }
      resolved++;
    }
    ids->len = kept;
  }
  free(again.p);
  free(j.prev_frame);
  free(j.prev_node);
  if (hs_ingest_compact_held(g) < 0 && !failed) failed = -2;
  return failed ? failed : resolved;
}

int64_t hs_ingest_callsite(const struct hs_ingest *g, uint64_t stack_id) {
  uint64_t cs;
  return hs_map_get(&g->res.callsites, stack_id, 0, &cs) ? (int64_t)cs : 0;
}
