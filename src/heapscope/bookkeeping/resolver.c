/* resolver.c: the stacks of one process kept and resolved (resolver.h). */
#include "resolver.h"

#include <stdlib.h>
#include <string.h>

#include "tracker_tables.h" /* hs_mix64 */
#include "wire.h"

/* client/pyframes.h HS_PY_FRAME_ENTRY (codec.PY_FRAME_ENTRY): the outermost frame of its activation. */
#define PY_FRAME_ENTRY 1u

/* ---- the records kept ---- */

static size_t held_slot(const struct hs_resolver *h, uint64_t stack_id) {
  size_t i = (size_t)hs_mix64(stack_id) & h->mask;
  while (h->offs_plus1[i] && h->ids[i] != stack_id) i = (i + 1) & h->mask;
  return i;
}

/* Grow the index to twice its capacity (16 slots at first). -1 on ENOMEM. */
static int held_grow(struct hs_resolver *h) {
  size_t cap = h->mask ? (h->mask + 1) * 2 : 16;
  uint64_t *ids = calloc(cap, sizeof *ids), *offs = calloc(cap, sizeof *offs);
  if (!ids || !offs) {
    free(ids);
    free(offs);
    return -1;
  }
  struct hs_resolver bigger = {.ids = ids, .offs_plus1 = offs, .mask = cap - 1};
  for (size_t i = 0; h->mask && i <= h->mask; i++) {
    if (!h->offs_plus1[i]) continue;
    size_t j = held_slot(&bigger, h->ids[i]);
    ids[j] = h->ids[i];
    offs[j] = h->offs_plus1[i];
  }
  free(h->ids);
  free(h->offs_plus1);
  h->ids = ids;
  h->offs_plus1 = offs;
  h->mask = cap - 1;
  return 0;
}

/* Keep one validated STACK record (header included). -1 on ENOMEM. */
static int held_add(struct hs_resolver *h, const uint8_t *rec, uint32_t size) {
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

int hs_resolver_keep(struct hs_resolver *g, const uint8_t *rec, uint32_t size) {
  struct hs_stack s;
  memcpy(&s, rec + 8, sizeof s);
  uint64_t cs;
  if (hs_map_get(&g->callsites, s.stack_id, 0, &cs)) return 0;
  uint32_t old_size;
  int waiting = hs_resolver_held(g, s.stack_id, &old_size) != NULL;
  if (held_add(g, rec, size) < 0) return -1;
  if (waiting) return 0;
  return hs_u64s_push(s.flags & HS_STACK_PYTHON ? &g->python : &g->native, s.stack_id);
}

/* Let go of the records of stacks no longer waiting. -1 on ENOMEM. */
static int compact_held(struct hs_resolver *g) {
  if (g->count == g->native.len + g->python.len + g->parked.len) return 0;
  struct hs_resolver kept = {0};
  const struct hs_u64s *lists[3] = {&g->parked, &g->native, &g->python};
  for (int l = 0; l < 3; l++) {
    for (size_t n = 0; n < lists[l]->len; n++) {
      uint32_t size;
      const uint8_t *rec = hs_resolver_held(g, lists[l]->p[n], &size);
      if (rec && held_add(&kept, rec, size) < 0) {
        free(kept.arena.p);
        free(kept.ids);
        free(kept.offs_plus1);
        return -1;
      }
    }
  }
  free(g->arena.p);
  free(g->ids);
  free(g->offs_plus1);
  g->arena = kept.arena;
  g->ids = kept.ids;
  g->offs_plus1 = kept.offs_plus1;
  g->mask = kept.mask;
  g->count = kept.count;
  return 0;
}

const uint8_t *hs_resolver_held(const struct hs_resolver *h, uint64_t stack_id, uint32_t *size) {
  if (!h->count) return NULL;
  size_t i = held_slot(h, stack_id);
  if (!h->offs_plus1[i]) return NULL;
  const uint8_t *rec = h->arena.p + (h->offs_plus1[i] - 1);
  uint64_t hdr;
  memcpy(&hdr, rec, sizeof hdr);
  *size = HS_RECORD_SIZE(hdr);
  return rec;
}

int hs_resolver_record_ok(const uint8_t *body, uint64_t body_size) {
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

/* ---- resolving ---- */

int hs_resolver_define_code(struct hs_resolver *s, uint64_t key) {
  return hs_map_put(&s->codes, key, 0, 1);
}

void hs_resolver_forget_pcs(struct hs_resolver *s) {
  hs_map_destroy(&s->pcs);
  s->pcs = (struct hs_map){0};
}

void hs_resolver_destroy(struct hs_resolver *r) {
  free(r->arena.p);
  free(r->ids);
  free(r->offs_plus1);
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

/* The frames of one kept STACK record (rec) in j->path, leaf first; an outcome. */
static int stack_path(struct job *j, const uint8_t *rec, const struct hs_splice *sp, uint64_t *unplaced) {
  struct hs_stack s;
  memcpy(&s, rec + 8, sizeof s);
  const uint64_t *pcs = (const uint64_t *)(rec + 8 + sizeof s);
  j->n = 0;
  if (!(s.flags & HS_STACK_PYTHON)) return native_path(j, pcs, s.depth);
  struct hs_pystack ps;
  const uint8_t *at = rec + 8 + sizeof s + 8ull * s.depth;
  memcpy(&ps, at, sizeof ps);
  uint64_t more = 0;
  int outcome = python_path(j, pcs, s.depth, at + sizeof ps, ps.py_depth, sp, &more);
  if (outcome == RESOLVED) *unplaced += more;
  return outcome;
}

int64_t hs_resolver_frames(struct hs_resolver *r, uint64_t stack_id, const struct hs_splice *sp, hs_namer namer,
                           void *ctx) {
  uint32_t size;
  const uint8_t *rec = hs_resolver_held(r, stack_id, &size);
  if (!rec) return -3;
  struct job j = {r, namer, ctx, 0, NULL, NULL, 0, 0};
  uint64_t unplaced = 0;
  int outcome = stack_path(&j, rec, sp, &unplaced);
  if (outcome != RESOLVED) return outcome == PARKS || outcome == WAITS ? -3 : outcome == FAILED ? -1 : -2;
  /* Root first, runs of a FILTERED frame collapsed, as callsite_of_path walks it. */
  for (size_t a = 0, b = j.n ? j.n - 1 : 0; a < b; a++, b--) {
    uint32_t t = r->path[a];
    r->path[a] = r->path[b];
    r->path[b] = t;
  }
  size_t k = 0;
  for (size_t i = 0; i < j.n; i++) {
    uint32_t f = r->path[i];
    if (k && f == r->path[k - 1] && (f & 0x80000000u)) continue;
    r->path[k++] = f;
  }
  for (size_t i = 0; i < k; i++) r->path[i] &= 0x7fffffffu;
  return (int64_t)k;
}

int64_t hs_resolver_resolve(struct hs_resolver *r, struct hs_trie *trie, struct hs_tracker *tracker,
                          const struct hs_splice *sp, hs_namer namer, void *ctx, uint64_t *unplaced) {
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
      const uint8_t *rec = hs_resolver_held(r, stack_id, &size);
      if (!rec) continue; /* cannot happen: a waiting stack is held */
      int outcome = stack_path(&j, rec, sp, unplaced);
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
          hs_tracker_set_callsite(tracker, stack_id, (uint64_t)cs) < 0) {
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
  if (compact_held(r) < 0 && !failed) failed = -2;
  return failed ? failed : resolved;
}

int64_t hs_resolver_callsite(const struct hs_resolver *s, uint64_t stack_id) {
  uint64_t cs;
  return hs_map_get(&s->callsites, stack_id, 0, &cs) ? (int64_t)cs : 0;
}
