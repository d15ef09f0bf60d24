/* cfa_eh.c: the half of our CFA unwinder (cfa.h) that reads .eh_frame:
 * bounded reads of .eh_frame_hdr and .eh_frame, the CIE and FDE programs,
 * and the memo of decoded FDEs. The caches and the walk are cfa.c's; both
 * halves share cfa_eh.h. The formats: see cfa.c's head. */
#include "cfa_eh.h"

#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#include "own.h"

/* ---- the memo of decoded FDEs ----
 *
 * A miss in a function already seen would run its FDE's program again up
 * to the new pc: in a large function (CPython's _PyEval_EvalFrameDefault,
 * cc1plus's parser) a few thousand instructions each time. The memo keeps
 * the rows a run went through: the pcs where the rule changes, with the
 * rule from there on, and how far they are known (up to the loc where the
 * run stopped, past its target). The first miss in an FDE runs its program
 * up to its pc, as before, and keeps the rows; a later miss below that
 * point is a binary search over them; one above runs the whole program
 * once and keeps all its rows. So an FDE met once costs what it did, and
 * one met often costs at most two runs. The rows give exactly what the
 * program run up to a pc gives (run stops at the first advance past its
 * target, so the rule of a target is that of the row that holds it); an
 * FDE whose rows cannot say so (a set_loc or an advance that goes back, an
 * instruction run refuses, more rows than fit) is not kept, and its misses
 * run the program as before.
 *
 * One mapping, made at init: MEMO_FDES entries (an open-addressed table on
 * the FDE's address, MEMO_PROBES slots from its hash) and MEMO_ROWS row
 * words, each (offset of the row's first pc from the FDE's start) << 32 |
 * rule, offsets strictly increasing, no two neighbours with the same rule.
 * When the rows are full, the whole memo is dropped (memo_gen moves on:
 * an entry of another generation is empty) and fills again. An unload
 * drops it too (note_unloads): another object may then have an FDE at a
 * dropped one's address.
 *
 * Read and written only inside dl_iterate_phdr callbacks, under the
 * loader's lock, and never twice at once in one thread (the client's
 * guard): plain loads and stores. */
#define MEMO_BITS 12
#define MEMO_FDES (1u << MEMO_BITS)
#define MEMO_PROBES 8
#define MEMO_ROWS (1u << 16)

struct memo_fde {
  uint64_t fde;     /* the FDE's address */
  uint64_t start;   /* its first pc */
  uint32_t range;   /* pcs in [start, start + range) */
  uint32_t known;   /* the rows hold the rules of [start, start + known) */
  uint32_t row, nrows;
  uint32_t gen; /* memo_gen when stored; any other: an empty slot */
};

static struct memo_fde *memo; /* NULL: no memo, misses as before */
static uint64_t *memo_rows;
static uint32_t memo_gen = 1, memo_used;
static uint64_t n_memo_hits, n_memo_fills, n_memo_fails, n_memo_drops;

void hs_cfa_memo_clear(void) {
  __atomic_fetch_add(&n_memo_drops, 1, __ATOMIC_RELAXED);
  if (++memo_gen == 0)
    memo_gen = 1;
  memo_used = 0;
}

void hs_cfa_memo_init(void) {
  /* Its pages are written as it fills. */
  void *mm = mmap(NULL, MEMO_FDES * sizeof(struct memo_fde) + MEMO_ROWS * sizeof(uint64_t),
                  PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const char *off = secure_getenv("HEAPSCOPE_UNWIND_MEMO"); /* "0": off, for A/B runs */
  if (mm != MAP_FAILED && !(off && off[0] == '0' && off[1] == '\0')) {
    memo_rows = (uint64_t *)(void *)((char *)mm + MEMO_FDES * sizeof(struct memo_fde));
    memo = mm;
    hs_own_map(mm, MEMO_FDES * sizeof(struct memo_fde) + MEMO_ROWS * sizeof(uint64_t), HS_OWN_PRIVATE);
  } else if (mm != MAP_FAILED) {
    munmap(mm, MEMO_FDES * sizeof(struct memo_fde) + MEMO_ROWS * sizeof(uint64_t));
  }
}

void hs_cfa_memo_stats(struct hs_cfa_stats *out) {
  out->memo_hits = __atomic_load_n(&n_memo_hits, __ATOMIC_RELAXED);
  out->memo_fills = __atomic_load_n(&n_memo_fills, __ATOMIC_RELAXED);
  out->memo_fails = __atomic_load_n(&n_memo_fails, __ATOMIC_RELAXED);
  out->memo_drops = __atomic_load_n(&n_memo_drops, __ATOMIC_RELAXED);
}

/* ---- bounded reads of .eh_frame_hdr and .eh_frame ---- */

struct rd {
  const uint8_t *p, *end;
  int bad;
};

static int rd_take(struct rd *r, void *out, size_t n) {
  if (r->bad || (size_t)(r->end - r->p) < n) {
    r->bad = 1;
    memset(out, 0, n);
    return 0;
  }
  memcpy(out, r->p, n);
  r->p += n;
  return 1;
}

static inline uint8_t rd_u8(struct rd *r) {
  if (HS_LIKELY(!r->bad && r->p < r->end))
    return *r->p++;
  r->bad = 1;
  return 0;
}

/* One LEB128 number; a signed one is sign-extended from its last byte's
 * bit 6. Too long (over 64 bits) or past the end: r->bad, 0. */
static __attribute__((noinline)) uint64_t rd_leb(struct rd *r, int is_signed) {
  uint64_t v = 0;
  for (unsigned shift = 0;; shift += 7) {
    uint8_t b = rd_u8(r);
    if (r->bad || shift > 63) {
      r->bad = 1;
      return 0;
    }
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      if (is_signed && (b & 0x40) && shift + 7 < 64)
        v |= ~UINT64_C(0) << (shift + 7);
      return v;
    }
  }
}

/* Most numbers of a CFA program are one byte: read here, the rest by rd_leb. */
static inline __attribute__((always_inline)) uint64_t rd_uleb(struct rd *r) {
  if (HS_LIKELY(!r->bad && r->p < r->end && !(*r->p & 0x80)))
    return *r->p++;
  return rd_leb(r, 0);
}

static inline __attribute__((always_inline)) int64_t rd_sleb(struct rd *r) {
  if (HS_LIKELY(!r->bad && r->p < r->end && !(*r->p & 0x80))) {
    uint8_t b = *r->p++;
    return (int64_t)(b & 0x40 ? (uint64_t)b | ~UINT64_C(0) << 7 : b);
  }
  return (int64_t)rd_leb(r, 1);
}

/* A pointer in DW_EH_PE_* encoding: absolute, pc-relative or (for the
 * .eh_frame_hdr table) relative to datarel; indirect and the rarer bases
 * are refused. */
static uint64_t rd_ptr(struct rd *r, uint8_t enc, uint64_t datarel) {
  uint64_t field = (uint64_t)(uintptr_t)r->p, v = 0;
  if (enc == 0xff || (enc & 0x80)) {
    r->bad = 1;
    return 0;
  }
  switch (enc & 0x0f) {
  case 0x00: case 0x04: case 0x0c: {
    uint64_t x;
    rd_take(r, &x, 8);
    v = x;
    break;
  }
  case 0x01: v = rd_uleb(r); break;
  case 0x09: v = (uint64_t)rd_sleb(r); break;
  case 0x02: { uint16_t x; rd_take(r, &x, 2); v = x; break; }
  case 0x03: { uint32_t x; rd_take(r, &x, 4); v = x; break; }
  case 0x0a: { int16_t x; rd_take(r, &x, 2); v = (uint64_t)(int64_t)x; break; }
  case 0x0b: { int32_t x; rd_take(r, &x, 4); v = (uint64_t)(int64_t)x; break; }
  default: r->bad = 1; return 0;
  }
  switch (enc & 0x70) {
  case 0x00: break;
  case 0x10: v += field; break;
  case 0x30: v += datarel; break;
  default: r->bad = 1; return 0;
  }
  return v;
}

/* The readable PT_LOAD segment of the object that holds [addr, addr + 4):
 * every read of unwind tables stays inside it. */
static int segment_of(const struct dl_phdr_info *info, uintptr_t addr, struct rd *r) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R))
      continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (addr >= lo && addr < hi && hi - addr >= 4) {
      r->p = (const uint8_t *)addr;
      r->end = (const uint8_t *)hi;
      r->bad = 0;
      return 1;
    }
  }
  return 0;
}

/* One CIE or FDE: its length word (the 64-bit form is refused) and the end
 * of its body, kept inside the segment. */
static int rd_entry(const struct dl_phdr_info *info, uintptr_t at, struct rd *r) {
  if (!segment_of(info, at, r))
    return 0;
  uint32_t len;
  rd_take(r, &len, 4);
  if (r->bad || len == 0 || len == 0xffffffffu || len > (size_t)(r->end - r->p))
    return 0;
  r->end = r->p + len;
  return 1;
}

/* ---- the CFA program ---- */

enum { R_SAME = 0, R_OFF, R_UNDEF, R_OTHER };

struct reg_rule {
  int kind;
  int64_t off;
};

/* DWARF register numbers on x86_64: rbp 6, rsp 7, the return address 16. */
struct state {
  int64_t cfa_reg; /* -1: an expression */
  int64_t cfa_off;
  struct reg_rule bp, sp, ra;
};

struct cie {
  uint64_t code_align;
  int64_t data_align;
  uint64_t ra_reg;
  uint8_t fde_enc;
  int has_z;
  const uint8_t *insns, *end;
};

static struct reg_rule *rule_of(struct state *s, const struct cie *c, uint64_t reg) {
  if (reg == 6)
    return &s->bp;
  if (reg == 7)
    return &s->sp;
  if (reg == c->ra_reg)
    return &s->ra;
  return NULL; /* a register the walk does not need */
}

static void set_rule(struct state *s, const struct cie *c, uint64_t reg, int kind, int64_t off) {
  struct reg_rule *rr = rule_of(s, c, reg);
  if (rr)
    *rr = (struct reg_rule){kind, off};
}

#define MAX_REMEMBER 8

/* The memo's fill (see below): the rows a run goes through, and where it
 * stopped. */
struct rows {
  uint64_t *a;
  uint64_t start;
  uint32_t n, cap;
  int bad;       /* ROWS_BACK or ROWS_FULL */
  uint64_t stop; /* the run's loc when it stopped past its target; ~0: the program's end */
};
enum { ROWS_BACK = 1, ROWS_FULL = 2 };

/* The rule of a state at some pc, or a KIND_GIVEUP rule. */
static inline uint64_t state_rule(const struct state *s) {
  uint64_t giveup = make_rule(KIND_GIVEUP, 0, 0);
  if (s->ra.kind == R_UNDEF)
    return make_rule(KIND_END, 0, 0);
  if (s->ra.kind != R_OFF || s->ra.off != -8 || s->sp.kind != R_SAME)
    return giveup;
  if ((s->cfa_reg != 6 && s->cfa_reg != 7) || s->cfa_off < 8 || s->cfa_off >= (1 << OFF_BITS))
    return giveup;
  if (s->cfa_off & 7)
    return giveup;
  uint64_t k = 0;
  if (s->bp.kind == R_OFF) {
    /* rbp saved below the return address, inside the frame. */
    if (s->bp.off > -16 || (s->bp.off & 7) || -s->bp.off / 8 >= (1 << K_BITS))
      return giveup;
    k = (uint64_t)(-s->bp.off / 8);
    if (s->cfa_reg == 7 && (int64_t)(8 * k) > s->cfa_off)
      return giveup;
  } else if (s->bp.kind != R_SAME) {
    return giveup;
  }
  return make_rule(s->cfa_reg == 7 ? KIND_RSP : KIND_RBP, (uint64_t)s->cfa_off, k);
}

/* A row from loc (to next, the pc of the next row) with the rule of s. */
static inline __attribute__((always_inline)) void row_put(struct rows *w, uint64_t loc,
                                                          uint64_t next, const struct state *s) {
  if (HS_UNLIKELY(w->bad))
    return;
  if (HS_UNLIKELY(next < loc || loc - w->start > UINT32_MAX)) { /* also loc < start */
    w->bad = ROWS_BACK;
    return;
  }
  uint64_t off = loc - w->start, rule = state_rule(s);
  if (w->n && w->a[w->n - 1] >> 32 == off)
    w->n--; /* an empty row (advance by 0): the one after covers its pc */
  if (w->n && (w->a[w->n - 1] & RULE_MASK) == rule)
    return; /* the rule of the row before goes on */
  if (w->n == w->cap) {
    w->bad = ROWS_FULL;
    return;
  }
  w->a[w->n++] = off << 32 | rule;
}

/* Runs instructions until the row that covers target; for the CIE's
 * initial instructions, target is ~0. init: the state after the CIE (for
 * DW_CFA_restore). rows (the memo's fill, or NULL) gets each row's start and
 * state, at each advance and set_loc. Returns 0, or -1 for anything
 * unexpected. Long on purpose: one switch over the DWARF call frame
 * instructions, the opcode table itself, which every miss runs. */
static inline __attribute__((always_inline)) int
run_body(struct rd *r, const struct cie *c, uint64_t loc, uint64_t target, struct state *s,
         const struct state *init, struct rows *rows) {
  struct state saved[MAX_REMEMBER];
  int depth = 0;
  while (r->p < r->end && !r->bad) {
    uint8_t op = rd_u8(r);
    uint64_t reg, delta = 0;
    int64_t off;
    switch (op & 0xc0) {
    case 0x40:
      delta = op & 0x3f;
      goto advance;
    case 0x80:
      off = (int64_t)rd_uleb(r) * c->data_align;
      set_rule(s, c, op & 0x3f, R_OFF, off);
      continue;
    case 0xc0: {
      struct reg_rule *rr = rule_of(s, c, op & 0x3f);
      if (rr && init)
        *rr = *rule_of((struct state *)init, c, op & 0x3f);
      continue;
    }
    default:
      break;
    }
    switch (op) {
    case 0x00: /* nop */
      continue;
    case 0x01: { /* set_loc */
      uint64_t next = rd_ptr(r, c->fde_enc, 0);
      if (rows)
        row_put(rows, loc, next, s);
      loc = next;
      if (loc > target)
        goto past;
      continue;
    }
    case 0x02: delta = rd_u8(r); goto advance;
    case 0x03: { uint16_t x; rd_take(r, &x, 2); delta = x; goto advance; }
    case 0x04: { uint32_t x; rd_take(r, &x, 4); delta = x; goto advance; }
    case 0x05: /* offset_extended */
      reg = rd_uleb(r);
      off = (int64_t)rd_uleb(r) * c->data_align;
      set_rule(s, c, reg, R_OFF, off);
      continue;
    case 0x11: /* offset_extended_sf */
      reg = rd_uleb(r);
      off = rd_sleb(r) * c->data_align;
      set_rule(s, c, reg, R_OFF, off);
      continue;
    case 0x2f: /* GNU_negative_offset_extended */
      reg = rd_uleb(r);
      off = -(int64_t)rd_uleb(r) * c->data_align;
      set_rule(s, c, reg, R_OFF, off);
      continue;
    case 0x06: { /* restore_extended */
      reg = rd_uleb(r);
      struct reg_rule *rr = rule_of(s, c, reg);
      if (rr && init)
        *rr = *rule_of((struct state *)init, c, reg);
      continue;
    }
    case 0x07: set_rule(s, c, rd_uleb(r), R_UNDEF, 0); continue;
    case 0x08: set_rule(s, c, rd_uleb(r), R_SAME, 0); continue;
    case 0x09: /* register */
      reg = rd_uleb(r);
      (void)rd_uleb(r);
      set_rule(s, c, reg, R_OTHER, 0);
      continue;
    case 0x14: case 0x15: /* val_offset, val_offset_sf */
      reg = rd_uleb(r);
      (void)(op == 0x14 ? (int64_t)rd_uleb(r) : rd_sleb(r));
      set_rule(s, c, reg, R_OTHER, 0);
      continue;
    case 0x10: case 0x16: { /* expression, val_expression */
      reg = rd_uleb(r);
      uint64_t len = rd_uleb(r);
      if (len > (uint64_t)(r->end - r->p))
        return -1;
      r->p += len;
      set_rule(s, c, reg, R_OTHER, 0);
      continue;
    }
    case 0x0a: /* remember_state */
      if (depth == MAX_REMEMBER)
        return -1;
      saved[depth++] = *s;
      continue;
    case 0x0b: /* restore_state: the CFA rule too, as GCC's epilogues expect
                * (and libgcc's unwind-dw2.c does) */
      if (depth == 0)
        return -1;
      *s = saved[--depth];
      continue;
    case 0x0c: /* def_cfa */
      s->cfa_reg = (int64_t)rd_uleb(r);
      s->cfa_off = (int64_t)rd_uleb(r);
      continue;
    case 0x12: /* def_cfa_sf */
      s->cfa_reg = (int64_t)rd_uleb(r);
      s->cfa_off = rd_sleb(r) * c->data_align;
      continue;
    case 0x0d: s->cfa_reg = (int64_t)rd_uleb(r); continue;
    case 0x0e: s->cfa_off = (int64_t)rd_uleb(r); continue;
    case 0x13: s->cfa_off = rd_sleb(r) * c->data_align; continue;
    case 0x0f: { /* def_cfa_expression */
      uint64_t len = rd_uleb(r);
      if (len > (uint64_t)(r->end - r->p))
        return -1;
      r->p += len;
      s->cfa_reg = -1;
      continue;
    }
    case 0x2e: (void)rd_uleb(r); continue; /* GNU_args_size */
    default:
      return -1;
    }
  advance:
    if (rows)
      row_put(rows, loc, loc + delta * c->code_align, s);
    loc += delta * c->code_align;
    if (loc > target)
      goto past;
  }
  if (rows && !r->bad) {
    row_put(rows, loc, ~(uint64_t)0, s); /* the last row: to the end of the FDE */
    rows->stop = ~(uint64_t)0;
  }
  return r->bad ? -1 : 0;
past:
  if (rows)
    rows->stop = loc;
  return 0;
}

/* The run of every miss, and the memo's, which keeps the rows. */
static __attribute__((noinline)) int run(struct rd *r, const struct cie *c, uint64_t loc,
                                         uint64_t target, struct state *s,
                                         const struct state *init) {
  return run_body(r, c, loc, target, s, init, NULL);
}

static __attribute__((noinline)) int run_rows(struct rd *r, const struct cie *c, uint64_t loc,
                                              uint64_t target, struct state *s,
                                              const struct state *init, struct rows *rows) {
  return run_body(r, c, loc, target, s, init, rows);
}

/* The CIE at cie_at: its factors and augmentation ("z", "R", "P", "L";
 * "S", a signal frame, and anything else are refused). */
static __attribute__((noinline)) int parse_cie(const struct dl_phdr_info *info, uintptr_t cie_at, struct cie *c) {
  struct rd r;
  if (!rd_entry(info, cie_at, &r))
    return -1;
  uint32_t id;
  rd_take(&r, &id, 4);
  uint8_t version = rd_u8(&r);
  if (r.bad || id != 0 || (version != 1 && version != 3))
    return -1;
  const char *aug = (const char *)r.p;
  size_t alen = strnlen(aug, (size_t)(r.end - r.p));
  if (alen == (size_t)(r.end - r.p) || alen > 8)
    return -1;
  r.p += alen + 1;
  c->code_align = rd_uleb(&r);
  c->data_align = rd_sleb(&r);
  c->ra_reg = version == 1 ? rd_u8(&r) : rd_uleb(&r);
  c->fde_enc = 0;
  c->has_z = alen > 0 && aug[0] == 'z';
  if (alen > 0 && !c->has_z)
    return -1;
  if (c->has_z) {
    uint64_t len = rd_uleb(&r);
    if (r.bad || len > (uint64_t)(r.end - r.p))
      return -1;
    const uint8_t *data_end = r.p + len;
    for (size_t i = 1; i < alen; i++) {
      switch (aug[i]) {
      case 'R': c->fde_enc = rd_u8(&r); break;
      case 'L': (void)rd_u8(&r); break;
      case 'P': /* the personality routine: skipped, whatever its encoding */
        (void)rd_ptr(&r, rd_u8(&r) & 0x0f, 0);
        break;
      default: return -1; /* 'S' (a signal frame) and anything new */
      }
    }
    if (r.bad || r.p > data_end)
      return -1;
    r.p = data_end;
  }
  if (r.bad || c->code_align == 0)
    return -1;
  c->insns = r.p;
  c->end = r.end;
  return 0;
}



static inline uint32_t memo_hash(uintptr_t fde) {
  return (uint32_t)(((uint64_t)fde * UINT64_C(0x9e3779b97f4a7c15)) >> (64 - MEMO_BITS));
}

/* The FDE's entry, or NULL; with put, else the slot to store it in (the
 * first empty one, or the last probed when all are taken: its rows stay
 * unused until the next drop). */
static struct memo_fde *memo_find(uintptr_t fde, int put) {
  uint32_t h = memo_hash(fde);
  struct memo_fde *e = NULL;
  for (uint32_t i = 0; i < MEMO_PROBES; i++) {
    e = &memo[(h + i) & (MEMO_FDES - 1)];
    if (e->gen != memo_gen) /* entries are never taken out one by one: the probe ends here */
      return put ? e : NULL;
    if (e->fde == fde)
      return e;
  }
  return put ? e : NULL;
}

/* The rule of target, inside what the entry knows: the last row at or
 * before it. */
static uint64_t memo_rule(const struct memo_fde *e, uint64_t target) {
  const uint64_t *a = memo_rows + e->row;
  uint64_t key = (target - e->start) << 32 | UINT32_MAX;
  uint32_t lo = 0, hi = e->nrows; /* a[0] is the row of start: offset 0 */
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (a[mid] <= key)
      lo = mid;
    else
      hi = mid;
  }
  return a[lo] & RULE_MASK;
}

/* Runs the FDE's program (f: at its first instruction; init: the state
 * after the CIE's) up to upto into the rows, and stores its entry. NULL:
 * not kept (the caller runs the program up to its pc as before). */
static __attribute__((noinline)) const struct memo_fde *
memo_fill(uintptr_t fde, uint64_t start, uint64_t range, uint64_t upto, const struct rd *f,
          const struct cie *c, const struct state *init) {
  if (range == 0 || range > UINT32_MAX || start + range - 1 < start)
    goto fail;
  for (int pass = 0; pass < 2; pass++) {
    struct rows w = {memo_rows + memo_used, start, 0, MEMO_ROWS - memo_used, 0, 0};
    struct rd r = *f;
    struct state s = *init;
    /* run stops at the first advance past upto: the rows hold every pc below. */
    if (run_rows(&r, c, start, upto, &s, init, &w) < 0 || w.bad == ROWS_BACK)
      goto fail;
    if (w.bad == ROWS_FULL) {
      if (memo_used == 0)
        goto fail; /* more rows than the whole memo holds */
      hs_cfa_memo_clear(); /* full: everything goes, this FDE first in again */
      continue;
    }
    if (w.n == 0)
      goto fail;
    struct memo_fde *e = memo_find(fde, 1);
    uint64_t known = w.stop - start < range ? w.stop - start : range;
    *e = (struct memo_fde){fde, start, (uint32_t)range, (uint32_t)known, memo_used, w.n, memo_gen};
    memo_used += w.n;
    __atomic_fetch_add(&n_memo_fills, 1, __ATOMIC_RELAXED);
    return e;
  }
fail:
  __atomic_fetch_add(&n_memo_fails, 1, __ATOMIC_RELAXED);
  return NULL;
}

/* x86_64 Linux's signal return trampoline (__restore_rt):
 * mov $15, %rax; syscall. */
static const uint8_t sigreturn_code[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};

static uint64_t fde_rule(const struct dl_phdr_info *info, uintptr_t fde_at, uintptr_t target,
                         int use_memo);

int hs_cfa_eh_table(const struct dl_phdr_info *info, uintptr_t *hdr_out, const int32_t **table,
                    uint64_t *count_out) {
  const ElfW(Phdr) *hdr_ph = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
      hdr_ph = &info->dlpi_phdr[i];
  if (!hdr_ph)
    return -1;
  uintptr_t hdr = info->dlpi_addr + hdr_ph->p_vaddr;
  struct rd r;
  if (!segment_of(info, hdr, &r))
    return -1;
  uint8_t version = rd_u8(&r), ptr_enc = rd_u8(&r), count_enc = rd_u8(&r), table_enc = rd_u8(&r);
  if (version != 1 || table_enc != 0x3b) /* datarel | sdata4: what linkers write */
    return -1;
  (void)rd_ptr(&r, ptr_enc, hdr);
  uint64_t count = rd_ptr(&r, count_enc, hdr);
  if (r.bad || count == 0 || count > (uint64_t)(r.end - r.p) / 8)
    return -1;
  *hdr_out = hdr;
  *table = (const int32_t *)(const void *)r.p;
  *count_out = count;
  return 0;
}

uint64_t hs_cfa_rule_in(const struct dl_phdr_info *info, uintptr_t pc, uintptr_t text_end,
                        uintptr_t hdr, const int32_t *table, uint64_t count) {
  uint64_t giveup = make_rule(KIND_GIVEUP, 0, 0);
  if (text_end - pc >= sizeof sigreturn_code && memcmp((const void *)pc, sigreturn_code,
                                                       sizeof sigreturn_code) == 0)
    return RULE_SIGFRAME;
  if (!hdr)
    return giveup;
  /* The last entry whose start is <= pc - 1. */
  uintptr_t target = pc - 1;
  uint64_t lo = 0, hi = count;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (hdr + (uintptr_t)(intptr_t)table[2 * mid] <= target)
      lo = mid;
    else
      hi = mid;
  }
  if (hdr + (uintptr_t)(intptr_t)table[2 * lo] > target)
    return giveup;
  uintptr_t fde_at = hdr + (uintptr_t)(intptr_t)table[2 * lo + 1];
  return fde_rule(info, fde_at, target, 1);
}

/* The FDE at fde_at: its CIE, its pc range, and f left at its first
 * instruction. 0, or -1 when anything does not fit. */
static int fde_head(const struct dl_phdr_info *info, uintptr_t fde_at, struct rd *f, struct cie *c,
                    uint64_t *start, uint64_t *range) {
  if (!rd_entry(info, fde_at, f))
    return -1;
  uint32_t cie_ptr;
  uintptr_t cie_field = (uintptr_t)f->p;
  rd_take(f, &cie_ptr, 4);
  if (f->bad || cie_ptr == 0)
    return -1;
  if (parse_cie(info, cie_field - cie_ptr, c) < 0)
    return -1;
  *start = rd_ptr(f, c->fde_enc, 0);
  *range = rd_ptr(f, c->fde_enc & 0x0f, 0);
  if (f->bad)
    return -1;
  if (c->has_z) {
    uint64_t len = rd_uleb(f);
    if (f->bad || len > (uint64_t)(f->end - f->p))
      return -1;
    f->p += len;
  }
  return 0;
}

/* The rule for target (pc - 1) from the FDE at fde_at: from the memo when
 * use_memo (filling it at the FDE's first miss), else from its program run
 * up to target, as before the memo. */
static __attribute__((noinline)) uint64_t fde_rule(const struct dl_phdr_info *info,
                                                   uintptr_t fde_at, uintptr_t target,
                                                   int use_memo) {
  uint64_t giveup = make_rule(KIND_GIVEUP, 0, 0);
  uint64_t upto = target; /* the first run in an FDE: up to its pc, as without the memo */
  if (use_memo && memo) {
    const struct memo_fde *e = memo_find(fde_at, 0);
    if (e) {
      if (target - e->start >= e->range)
        return giveup;
      if (target - e->start < e->known) {
        __atomic_fetch_add(&n_memo_hits, 1, __ATOMIC_RELAXED);
        return memo_rule(e, target);
      }
      upto = e->start + e->range - 1; /* met again further on: the whole program */
    }
  }
  struct rd f;
  struct cie c;
  uint64_t start, range;
  if (fde_head(info, fde_at, &f, &c, &start, &range) < 0 || target < start ||
      target - start >= range)
    return giveup;
  struct state s = {-1, 0, {R_SAME, 0}, {R_SAME, 0}, {R_SAME, 0}};
  struct rd ci = {c.insns, c.end, 0};
  if (run(&ci, &c, start, ~(uint64_t)0, &s, NULL) < 0)
    return giveup;
  if (use_memo && memo) {
    const struct memo_fde *e = memo_fill(fde_at, start, range, upto, &f, &c, &s);
    if (e && target - start < e->known)
      return memo_rule(e, target);
  }
  struct state init = s;
  if (run(&f, &c, start, target, &s, &init) < 0)
    return giveup;
  return state_rule(&s);
}


#ifdef HS_CFA_SELFTEST
/* For tests/unit/client/cfa_test.c alone (built with -DHS_CFA_SELFTEST):
 * every FDE of the object whose code holds addr, and every pc in each, the
 * rule through the memo against the rule of the program run up to the pc. */
struct selftest {
  uintptr_t addr;
  struct hs_cfa_selftest *out;
};

static int selftest_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct selftest *t = data;
  int mine = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && t->addr >= lo &&
        t->addr - lo < ph->p_memsz)
      mine = 1;
  }
  if (!mine)
    return 0;
  const ElfW(Phdr) *hdr_ph = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
      hdr_ph = &info->dlpi_phdr[i];
  struct rd r;
  uintptr_t hdr = hdr_ph ? info->dlpi_addr + hdr_ph->p_vaddr : 0;
  if (!hdr_ph || !segment_of(info, hdr, &r))
    return 1;
  uint8_t version = rd_u8(&r), ptr_enc = rd_u8(&r), count_enc = rd_u8(&r), table_enc = rd_u8(&r);
  (void)rd_ptr(&r, ptr_enc, hdr);
  uint64_t count = rd_ptr(&r, count_enc, hdr);
  if (r.bad || version != 1 || table_enc != 0x3b || count > (uint64_t)(r.end - r.p) / 8)
    return 1;
  const int32_t *table = (const int32_t *)(const void *)r.p;
  for (uint64_t i = 0; i < count; i++) {
    uintptr_t fde_at = hdr + (uintptr_t)(intptr_t)table[2 * i + 1];
    struct rd f;
    struct cie c;
    uint64_t start, range;
    if (fde_head(info, fde_at, &f, &c, &start, &range) < 0 || range > (1u << 24))
      continue;
    t->out->fdes++;
    /* The middle first (rows kept up to there), then every pc in order
     * (those below from the rows of that first run, the first one above
     * runs the whole program), and one pc on either side of the range
     * (both "give up"). */
    uint64_t mid = start + range / 2;
    for (uint64_t n = 0; n < range + 3; n++) {
      uint64_t at = n == 0 ? mid : start - 2 + n;
      uint64_t a = fde_rule(info, fde_at, at, 1), b = fde_rule(info, fde_at, at, 0);
      t->out->pcs++;
      t->out->rules_hash = (t->out->rules_hash ^ (at - start) ^ b << 32) * UINT64_C(0x100000001b3);
      if (a != b && t->out->differ++ < 8)
        t->out->first_differ[t->out->differ - 1] = at;
    }
    if (memo && memo_find(fde_at, 0))
      t->out->kept++;
  }
  return 1;
}

void hs_cfa_selftest(uintptr_t addr, struct hs_cfa_selftest *out) {
  struct selftest t = {addr, out};
  memset(out, 0, sizeof *out);
  dl_iterate_phdr(selftest_object, &t);
}
#endif
