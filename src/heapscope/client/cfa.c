/* cfa.c: see cfa.h. The DWARF call frame format is described in the DWARF 4
 * standard, section 6.4 (https://dwarfstd.org/doc/DWARF4.pdf), and the
 * .eh_frame / .eh_frame_hdr layout in the Linux Standard Base, "Exception
 * Frames" (https://refspecs.linuxfoundation.org/LSB_5.0.0/LSB-Core-generic/
 * LSB-Core-generic/ehframechpt.html).
 *
 * This half: the caches, the objects seen, the miss and the walk; reading
 * .eh_frame and running its programs is cfa_eh.c's. */
#include "cfa.h"

#include <link.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#include "cfa_eh.h"
#include "own.h"
#include "state.h"

/* ---- the caches ---- */


/* The main cache, 2^16 words: tag (pc >> 16, 31 bits: user-space pcs are
 * below 2^47) << 33 | 1 << 32 (set in every entry: 0 is an empty word) |
 * rule. The slot is (pc ^ tag) & mask, so tag and slot together give back
 * the whole pc: a matching tag in the slot is an exact hit. */
#define CACHE_BITS 16
#define CACHE_SLOTS (1u << CACHE_BITS)
#define TAG_SHIFT 33
#define ENTRY_VALID (UINT64_C(1) << 32)

/* The hot cache in front of it, what every frame looks at first: 2^8 sets
 * of 2 words (4 KiB, 64 lines), a word (pc >> 8) << 25 | rule, in set pc &
 * 255 (again an exact hit; the low bits of return addresses are as good as
 * a hash). A walk's pcs are spread over 64 lines here instead of 8,192, so
 * that a program's hot pcs stay in the nearer caches between samples, and
 * what a sample evicts of the program's own lines is less. A new word goes
 * first in its set, the one there moves second. "Give up" rules are never
 * stored here. An empty word is all ones: its tag (2^39 - 1) is no
 * user-space pc's (pc >> 8 < 2^39). */
#define HOT_SET_BITS 8
#define HOT_SETS (1u << HOT_SET_BITS)
#define HOT_WORDS (2 * HOT_SETS)
#define HOT_EMPTY (~UINT64_C(0))

static uint64_t *cache;
static uint64_t hot[HOT_WORDS] __attribute__((aligned(64)));
/* Bumped by every clear of the caches, between the main one's and the hot
 * one's (see lookup). */
static uint64_t clears;
/* The loader's load and unload counts when last looked at (under the
 * loader lock, in dl_iterate_phdr callbacks). */
static unsigned long long seen_adds, seen_subs;
static int have_counts;
static uint64_t n_misses, n_giveups, n_fp_steps;
/* Set when a "give up" entry is stored: a load then scans the cache for them
 * only if one may be there (a scan is 65,536 loads, and a Python program
 * loads dozens of extension modules). */
static int giveups_cached;


static inline uint32_t slot_of(uintptr_t pc) {
  return (uint32_t)((pc ^ (pc >> 16)) & (CACHE_SLOTS - 1));
}

static inline uint64_t *hot_set_of(uintptr_t pc) {
  return &hot[2 * (pc & (HOT_SETS - 1))];
}

static void cache_put(uintptr_t pc, uint64_t rule) {
  uint64_t tag = pc >> 16;
  if (tag >> 31)
    return;
  __atomic_store_n(&cache[slot_of(pc)], tag << TAG_SHIFT | ENTRY_VALID | rule, __ATOMIC_RELAXED);
  if ((rule & 3) == KIND_GIVEUP && !__atomic_load_n(&giveups_cached, __ATOMIC_RELAXED))
    __atomic_store_n(&giveups_cached, 1, __ATOMIC_RELEASE); /* after the entry */
}

/* The main cache, the count of clears, then the hot cache: a hot word
 * copied from a main word that this clear removed is seen by its writer
 * (lookup). */
static void cache_clear(void) {
  for (uint32_t i = 0; i < CACHE_SLOTS; i++)
    __atomic_store_n(&cache[i], 0, __ATOMIC_RELAXED);
  __atomic_fetch_add(&clears, 1, __ATOMIC_SEQ_CST);
  for (uint32_t i = 0; i < HOT_WORDS; i++)
    __atomic_store_n(&hot[i], HOT_EMPTY, __ATOMIC_RELAXED);
}

/* After a load: the "give up" entries go (a pc that was in no object may
 * be in the new one), unless another thread replaced one meanwhile. The hot
 * cache holds none. */
static void cache_clear_giveups(void) {
  if (!__atomic_exchange_n(&giveups_cached, 0, __ATOMIC_ACQUIRE))
    return; /* none stored since the last scan (one stored during this scan sets it again) */
  for (uint32_t i = 0; i < CACHE_SLOTS; i++) {
    uint64_t e = __atomic_load_n(&cache[i], __ATOMIC_RELAXED);
    if (e && (e & 3) == KIND_GIVEUP)
      (void)__atomic_compare_exchange_n(&cache[i], &e, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }
}


int hs_cfa_init(void) {
  if (cache)
    return 0;
  void *m = mmap(NULL, CACHE_SLOTS * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return -1;
  for (uint32_t i = 0; i < HOT_WORDS; i++)
    hot[i] = HOT_EMPTY;
  hs_cfa_memo_init();
  hs_own_map(m, CACHE_SLOTS * sizeof(uint64_t), HS_OWN_PRIVATE);
  cache = m;
  return 0;
}

void hs_cfa_stats(struct hs_cfa_stats *out) {
  out->misses = __atomic_load_n(&n_misses, __ATOMIC_RELAXED);
  out->giveups = __atomic_load_n(&n_giveups, __ATOMIC_RELAXED);
  out->fp_steps = __atomic_load_n(&n_fp_steps, __ATOMIC_RELAXED);
  hs_cfa_memo_stats(out);
}

/* ---- the objects ----
 *
 * What a miss needs of each object that dl_iterate_phdr shows it, kept
 * from the first look: its executable segment, to tell whether it holds
 * the pc, and (from the first miss inside it) its .eh_frame_hdr table.
 * Without it, each miss read every program header of every object before
 * the pc's (4 objects a miss in a Python program) and parsed the table's
 * header again. Keyed by dlpi_addr and dlpi_phdr in 128 slots (a collision
 * replaces); an object with more than one executable segment is not kept
 * (the loop below, as before). Same conditions as the memo: only inside
 * the callbacks, under the loader's lock; an unload empties it (obj_gen
 * moves on), as another object may then sit at the same addresses. */
#define OBJ_BITS 7
#define OBJ_SLOTS (1u << OBJ_BITS)

struct obj {
  uintptr_t base;         /* dlpi_addr */
  const ElfW(Phdr) *phdr; /* dlpi_phdr */
  uintptr_t lo, hi;       /* its executable PT_LOAD */
  uintptr_t hdr;          /* its .eh_frame_hdr, 0: none usable */
  const int32_t *table;
  uint64_t count;
  uint32_t gen;    /* obj_gen when stored; any other: an empty slot */
  int table_known; /* hdr, table, count read (at the first miss inside the object) */
};

static struct obj objs[OBJ_SLOTS];
static uint32_t obj_gen = 1;

static void objs_clear(void) {
  if (++obj_gen == 0)
    obj_gen = 1;
}

/* The object's entry, made at its first look; NULL: not kept. */
static struct obj *obj_of(const struct dl_phdr_info *info) {
  uint32_t slot = (uint32_t)(((uint64_t)info->dlpi_addr ^ (uint64_t)(uintptr_t)info->dlpi_phdr >> 6) *
                             UINT64_C(0x9e3779b97f4a7c15) >> (64 - OBJ_BITS));
  struct obj *o = &objs[slot];
  if (o->gen == obj_gen && o->base == info->dlpi_addr && o->phdr == info->dlpi_phdr)
    return o;
  int execs = 0;
  uintptr_t lo = 0, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      execs++;
      lo = info->dlpi_addr + ph->p_vaddr;
      hi = lo + ph->p_memsz;
    }
  }
  if (execs != 1 || hi < lo)
    return NULL;
  *o = (struct obj){info->dlpi_addr, info->dlpi_phdr, lo, hi, 0, NULL, 0, obj_gen, 0};
  return o;
}

static int note_unloads(struct dl_phdr_info *info, size_t size, void *data) {
  (void)data;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    if (have_counts && info->dlpi_subs != seen_subs) {
      cache_clear();
      hs_cfa_memo_clear();
      objs_clear();
    }
    else if (have_counts && info->dlpi_adds != seen_adds)
      cache_clear_giveups();
    seen_adds = info->dlpi_adds;
    seen_subs = info->dlpi_subs;
    have_counts = 1;
  }
  return 1;
}

/* Every 256th walk of a thread looks at the load and unload counts even
 * when every pc hits: one call of dl_iterate_phdr that stops at the first
 * object. */
static __attribute__((noinline)) void check_unloads(void) {
  dl_iterate_phdr(note_unloads, NULL);
}

void hs_cfa_note_unload(void) {
  if (__atomic_load_n(&cache, __ATOMIC_ACQUIRE) != NULL) /* not mapped: nothing cached */
    check_unloads();
}

struct miss {
  uintptr_t pc;
  uint64_t rule;
  int found; /* 0: pc in no object */
  int first;
};

static int find_rule(struct dl_phdr_info *info, size_t size, void *data) {
  struct miss *m = data;
  if (m->first) {
    m->first = 0;
    /* An object was unloaded since the last look: another may now sit at
     * its addresses, with other rules. */
    (void)note_unloads(info, size, NULL);
  }
  uintptr_t target = m->pc - 1;
  /* Only while unloads are seen (dlpi_subs): the entry holds pointers into
   * the object. */
  struct obj *o = have_counts ? obj_of(info) : NULL;
  if (o) {
    if (target - o->lo >= o->hi - o->lo)
      return 0;
    if (!o->table_known) {
      if (hs_cfa_eh_table(info, &o->hdr, &o->table, &o->count) < 0)
        o->hdr = 0;
      o->table_known = 1;
    }
    m->rule = m->pc < o->hi ? hs_cfa_rule_in(info, m->pc, o->hi, o->hdr, o->table, o->count)
                            : make_rule(KIND_GIVEUP, 0, 0);
    m->found = 1;
    cache_put(m->pc, m->rule); /* as below */
    return 1;
  }
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
      continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (target >= lo && target < hi) {
      uintptr_t hdr = 0;
      const int32_t *table = NULL;
      uint64_t count = 0;
      if (m->pc < hi && hs_cfa_eh_table(info, &hdr, &table, &count) < 0)
        hdr = 0;
      m->rule = m->pc < hi ? hs_cfa_rule_in(info, m->pc, hi, hdr, table, count)
                           : make_rule(KIND_GIVEUP, 0, 0);
      m->found = 1;
      /* Stored with the loader lock still held: a dlclose cannot unmap the
       * object between the reading of its tables and this store, so the
       * clear of the next miss after it comes later than the store. */
      cache_put(m->pc, m->rule);
      return 1;
    }
  }
  return 0;
}

static int populated;

static __attribute__((noinline)) uint64_t miss(uintptr_t pc) {
  __atomic_fetch_add(&n_misses, 1, __ATOMIC_RELAXED);
  /* The first miss writes the whole cache in: a walk reads a slot before a
   * miss writes it (256 pages, 512 faults on cc1plus otherwise). */
  hs_populate_once(&populated, cache, CACHE_SLOTS * sizeof(uint64_t));
  struct miss m = {pc, 0, 0, 1};
  dl_iterate_phdr(find_rule, &m);
  if (!m.found) {
    /* In no object (JIT code, or a pc that is not one): given up on at
     * once next time; the entry goes when an object is loaded. */
    m.rule = make_rule(KIND_GIVEUP, 0, 0);
    cache_put(pc, m.rule);
  }
  return m.rule;
}

/* A hot miss: the rule from the main cache (or a miss), copied first into
 * pc's hot set unless it is "give up". If the caches were cleared since
 * before the main word was read, both words stored are taken back: a clear
 * bumps `clears` after emptying the main cache and before emptying the hot
 * one, so either its emptying of the hot set comes after these stores, or
 * the load of `clears` after the fence sees the bump. */
static __attribute__((noinline)) uint64_t lookup(uintptr_t pc) {
  uint64_t gen = __atomic_load_n(&clears, __ATOMIC_ACQUIRE);
  uint64_t tag = pc >> 16;
  uint64_t e = __atomic_load_n(&cache[slot_of(pc)], __ATOMIC_RELAXED);
  uint64_t rule = (e >> TAG_SHIFT) == tag && (e & ENTRY_VALID) ? e & RULE_MASK : miss(pc);
  if ((rule & 3) != KIND_GIVEUP && !(pc >> 47)) {
    uint64_t *set = hot_set_of(pc);
    uint64_t h = (uint64_t)(pc >> HOT_SET_BITS) << RULE_BITS | rule;
    uint64_t moved = __atomic_load_n(&set[0], __ATOMIC_RELAXED);
    __atomic_store_n(&set[1], moved, __ATOMIC_RELAXED);
    __atomic_store_n(&set[0], h, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&clears, __ATOMIC_RELAXED) != gen) {
      (void)__atomic_compare_exchange_n(&set[0], &h, HOT_EMPTY, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
      (void)__atomic_compare_exchange_n(&set[1], &moved, HOT_EMPTY, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
    }
  }
  return rule;
}

/* ---- the walk ---- */

static __attribute__((noinline)) int give_up(void) {
  __atomic_fetch_add(&n_giveups, 1, __ATOMIC_RELAXED);
  return -1;
}

int hs_cfa_fp_steps;

/* The registers of a signal frame's ucontext: past uc_flags, uc_link and uc_stack. */
#define UC_GREGS 40

static inline void note_fp_step(void) {
  if (hs_cfa_fp_steps == 2)
    __atomic_fetch_add(&n_fp_steps, 1, __ATOMIC_RELAXED);
}

/* A frame whose return address is the signal return trampoline: *sp is the kernel's
 * ucontext, with the interrupted registers from byte UC_GREGS (REG_RBP 10, REG_RSP 15,
 * REG_RIP 16). Moves sp and bp_at to the interrupted frame and gives its rip; -1 when the
 * context is not on this stack above sp. */
static int sigframe_step(uintptr_t *sp, const uintptr_t **bp_at, uintptr_t *rip, uintptr_t hi) {
  if (hi - *sp < UC_GREGS + 17 * 8)
    return -1;
  const uintptr_t *gregs = (const uintptr_t *)(*sp + UC_GREGS);
  uintptr_t rsp = gregs[15];
  if (rsp <= *sp || rsp > hi - 8 || (rsp & 7) || gregs[16] == 0)
    return -1;
  note_fp_step();
  *bp_at = &gregs[10];
  *sp = rsp;
  *rip = gregs[16];
  return 0;
}

/* __builtin_frame_address makes GCC keep a frame pointer here: our own
 * frame is [fp] = the caller's rbp, [fp + 8] = the return address, and the
 * caller's rsp is fp + 16. Every later stack read is inside this thread's
 * stack, [lo, hi), at or above the current frame's rsp, and each CFA is
 * above the last. An rsp-based rule needs no check but the top: its offset
 * is >= 8, a multiple of 8, and covers the rbp slot (hs_cfa_rule_in); an rbp-based
 * one is checked whole, as rbp may hold anything. */
int hs_cfa_backtrace(uint64_t *buf, uint32_t want) {
  struct hs_thread *t = &hs_thread_state;
  if (HS_UNLIKELY(!t->stack_known))
    hs_thread_stack_bounds(t);
  /* record.c counts t->unwinds before each unwind: 1 is a thread's first. */
  if (HS_UNLIKELY((t->unwinds & 255) == 1))
    check_unloads();
  uintptr_t lo = t->stack_lo, hi = t->stack_hi;
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
  if (fp < lo || hi - lo < 16 || fp > hi - 16 || (fp & 7) || want == 0)
    return give_up(); /* on another stack (sigaltstack, a coroutine's) */
  const uintptr_t *frame = (const uintptr_t *)fp;
  /* rbp is not loaded where it is restored but where an rbp-based rule
   * needs it: bp_at is where the current frame's rbp is saved (the stack
   * above this frame does not change during the walk). Optimized code
   * without frame pointers saves rbp in most frames and bases almost no CFA
   * on it, so that most of these loads, and their cache lines, are saved. */
  const uintptr_t *bp_at = &frame[0];
  uintptr_t pc = frame[1], sp = fp + 16;
  uint64_t *out = buf, *last = buf + want - 1;
  for (;;) {
    *out = pc;
    if (out == last)
      return (int)want;
    out++;
  rule_of_pc:;
    uintptr_t tag = pc >> HOT_SET_BITS;
    const uint64_t *set = hot_set_of(pc);
    uint64_t rule = __atomic_load_n(&set[0], __ATOMIC_RELAXED);
    if ((rule >> RULE_BITS) != tag) {
      rule = __atomic_load_n(&set[1], __ATOMIC_RELAXED);
      if (HS_UNLIKELY((rule >> RULE_BITS) != tag))
        rule = lookup(pc);
    }
    uintptr_t off = rule & OFF_MASK;
    uintptr_t k8 = (rule >> (OFF_BITS - 3)) & (((UINT64_C(1) << K_BITS) - 1) << 3);
    uintptr_t cfa;
    /* rsp-based rules first: most frames of optimized code have them. */
    if (HS_LIKELY((rule & 3) == KIND_RSP)) {
      cfa = sp + off;
      if (HS_UNLIKELY(cfa > hi))
        return give_up();
    } else if ((rule & 3) == KIND_RBP) {
      cfa = *bp_at + off;
      /* cfa >= sp + 8 also rules out a wrap of bp + off. */
      if (cfa < sp + 8 || cfa > hi || (cfa & 7) || cfa - sp < k8)
        return give_up();
    } else if ((rule & 3) == KIND_END) {
      return (int)(out - buf);
    } else if ((rule & RULE_MASK) == RULE_SIGFRAME && hs_cfa_fp_steps) {
      uintptr_t rip;
      if (sigframe_step(&sp, &bp_at, &rip, hi) < 0)
        return give_up();
      *out = rip; /* no return address: out as it is, its rule the one at rip */
      if (out == last)
        return (int)want;
      out++;
      pc = rip + 1;
      goto rule_of_pc;
    } else {
      /* No rule for pc (JIT code, code without CFI): a frame-pointer step, as libunwind
       * takes; where rbp is no frame base the stack ends here, as libunwind's does. */
      if (!hs_cfa_fp_steps)
        return give_up();
      cfa = *bp_at + 16;
      if (cfa < sp + 16 || cfa > hi || (cfa & 7))
        return (int)(out - buf);
      k8 = 16;
      note_fp_step();
    }
    if (k8)
      bp_at = (const uintptr_t *)(cfa - k8);
    pc = *(const uintptr_t *)(cfa - 8);
    sp = cfa;
    if (HS_UNLIKELY(pc == 0))
      return give_up();
  }
}
