/* stacks.c: see stacks.h. */
#include "stacks.h"

#include <sys/mman.h>

#include "own.h"
#include "ring.h"
#include "wire.h"

/* Two tables (stacks.h): a small first one, populated at its first insert,
 * that takes ids until it holds FIRST_CAP of them, then the big one, whose
 * pages are touched only as ids land there. */
#define FIRST_BITS 15
#define FIRST_SLOTS (UINT64_C(1) << FIRST_BITS)
#define FIRST_CAP (FIRST_SLOTS / 2)
#define TABLE_BITS 20
#define TABLE_SLOTS (UINT64_C(1) << TABLE_BITS)
#define MAX_PROBES 64

static uint64_t *first, *table;
/* Ids in the first table, and whether it still takes new ones (1 until
 * first_count reaches FIRST_CAP; only ever goes 1 -> 0). */
static uint64_t first_count;
static int first_open;
static int first_populated;
/* The first state of lane 0: a fixed constant until a module is replaced
 * (hs_stacks_new_generation), so that a stack of the same pcs in the
 * library now at those addresses gets an id of its own. */
static uint64_t seed = UINT64_C(0x6a09e667f3bcc909);

void hs_stacks_new_generation(void) {
  uint64_t s = __atomic_load_n(&seed, __ATOMIC_RELAXED);
  __atomic_store_n(&seed, hs_id_mix(s + UINT64_C(0x9e3779b97f4a7c15)), __ATOMIC_RELAXED);
}


/* One multiplication per frame (rotate, xor, multiply: each step is a
 * bijection of the state for a given pc and of the pc for a given state),
 * in four independent lanes (frame i goes to lane i % 4): one chain of
 * multiplications over a deep stack was a visible part of a sample, four
 * overlap. The lanes are then folded by the same step and mixed
 * once. Two stacks of one depth that differ in a single frame differ in one
 * lane only, and every step after it is a bijection of that lane for the
 * others fixed: they never collide. */
uint64_t hs_stack_id(const uint64_t *pcs, uint32_t depth) {
  uint64_t h0 = __atomic_load_n(&seed, __ATOMIC_RELAXED) ^ depth, h1 = UINT64_C(0xbb67ae8584caa73b);
  uint64_t h2 = UINT64_C(0x3c6ef372fe94f82b), h3 = UINT64_C(0xa54ff53a5f1d36f1);
  /* A pointer, not a 32-bit index: the index's widening cost an lea per
   * frame (23 instructions per 4 frames, now 15; the id is the same). */
  const uint64_t *p = pcs, *end = pcs + depth;
  for (uint32_t n = depth / 4; n; n--, p += 4) {
    h0 = hs_id_step(h0, p[0]);
    h1 = hs_id_step(h1, p[1]);
    h2 = hs_id_step(h2, p[2]);
    h3 = hs_id_step(h3, p[3]);
  }
  if (p < end)
    h0 = hs_id_step(h0, p[0]);
  if (end - p > 1)
    h1 = hs_id_step(h1, p[1]);
  if (end - p > 2)
    h2 = hs_id_step(h2, p[2]);
  uint64_t h = hs_id_mix(hs_id_step(hs_id_step(hs_id_step(h0, h1), h2), h3));
  return h ? h : 1;
}

#define FIRST_BYTES (FIRST_SLOTS * sizeof(uint64_t))
#define TABLE_BYTES (TABLE_SLOTS * sizeof(uint64_t))
#define HUGE_BYTES (UINT64_C(2) << 20) /* x86-64's transparent huge page */

/* The big table, on a 2 MiB boundary and marked for transparent huge pages
 * (page faults): ids land on it at random, so a program that gets past the
 * first table soon touches every 4 KiB page of it, each twice (the probe's
 * read maps the zero page, the insert's write copies it): pyobjects.py's
 * ~11k ids there were 4,092 faults. In huge pages the same 8 MiB are 4 pages
 * of 2 MiB, ~8 faults (benchmarks/faults.py), and four TLB entries cover
 * what the probes read. The price is memory: a huge page is all there once
 * one id lands in it, so a program with few ids past the first table holds
 * up to 8 MiB where it held one 4 KiB page per id; one that never leaves
 * the first table holds none of it. Where THP is off ("never" in
 * /sys/kernel/mm/transparent_hugepage/enabled) or not built, the madvise
 * changes nothing or fails, and the table is the 4 KiB pages it was. The
 * 2 MiB of extra address space (MAP_NORESERVE, never touched) are given
 * back around the aligned part; if even they cannot be mapped, the table is
 * mapped unaligned. */
static uint64_t *map_table(void) {
  unsigned char *m = mmap(NULL, TABLE_BYTES + HUGE_BYTES, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    void *u = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return u == MAP_FAILED ? NULL : (uint64_t *)u;
  }
  uintptr_t start = ((uintptr_t)m + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
  size_t head = start - (uintptr_t)m;
  if (head)
    (void)munmap(m, head); /* a failure only leaves address space mapped */
  (void)munmap((void *)(start + TABLE_BYTES), HUGE_BYTES - head);
  (void)madvise((void *)start, TABLE_BYTES, MADV_HUGEPAGE);
  return (uint64_t *)start;
}

/* Called at start and in a fork child's restart, with no other thread of
 * ours able to run (session.c): the tables of before (a fork child's copies
 * of its parent's, counted in its RSS) are unmapped. */
int hs_stacks_init(void) {
  uint64_t *old_first = __atomic_load_n(&first, __ATOMIC_ACQUIRE);
  uint64_t *old_table = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
  __atomic_store_n(&first, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&table, NULL, __ATOMIC_RELEASE);
  hs_own_unmap(old_first);
  hs_own_unmap(old_table);
  if (old_first != NULL)
    (void)munmap(old_first, FIRST_BYTES);
  if (old_table != NULL)
    (void)munmap(old_table, TABLE_BYTES);
  void *f = mmap(NULL, FIRST_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint64_t *m = f == MAP_FAILED ? NULL : map_table();
  if (m == NULL) {
    if (f != MAP_FAILED)
      munmap(f, FIRST_BYTES);
    return -HS_ERR_OUT_OF_MEMORY;
  }
  hs_own_map(f, FIRST_BYTES, HS_OWN_PRIVATE);
  hs_own_map(m, TABLE_BYTES, HS_OWN_PRIVATE);
  __atomic_store_n(&first_count, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&first_open, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&first_populated, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&table, m, __ATOMIC_RELEASE);
  __atomic_store_n(&first, (uint64_t *)f, __ATOMIC_RELEASE);
  return HS_OK;
}

/* Probes t (mask + 1 slots) for id from its home slot: KNOWN when there,
 * NEW when this call stored it in an empty slot (only when `insert`), FULL
 * when it is not there and was not stored (an empty slot reached without
 * `insert`, or MAX_PROBES taken slots). Slots only ever go 0 -> id, so an
 * id that is in t lies before the first empty slot of its run. */
static inline enum hs_intern probe(uint64_t *t, uint64_t mask, uint64_t id, int insert) {
  uint64_t i = (id >> 7) & mask;
  for (int n = 0; n < MAX_PROBES; n++, i = (i + 1) & mask) {
    uint64_t v = __atomic_load_n(&t[i], __ATOMIC_RELAXED);
    if (v == id)
      return HS_STACK_KNOWN;
    if (v == 0) {
      if (!insert)
        return HS_STACK_FULL;
      if (__atomic_compare_exchange_n(&t[i], &v, id, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return HS_STACK_NEW;
      if (v == id) /* another thread inserted the same id first */
        return HS_STACK_KNOWN;
    }
  }
  return HS_STACK_FULL;
}

/* The first table first: while it is open a new id goes there; once closed
 * it only answers for the ids it holds, and the rest go to the big table.
 * A thread that saw it open and one that saw it closed may both insert the
 * same id (one in each) around the close: that stack is then sent twice,
 * which the producer takes as it takes HS_STACK_FULL's resends. */
enum hs_intern hs_stacks_intern(uint64_t id) {
  uint64_t *f = __atomic_load_n(&first, __ATOMIC_ACQUIRE);
  if (f == NULL)
    return HS_STACK_FULL;
  int open = __atomic_load_n(&first_open, __ATOMIC_RELAXED);
  enum hs_intern in = probe(f, FIRST_SLOTS - 1, id, open);
  if (in == HS_STACK_KNOWN)
    return in;
  if (in == HS_STACK_NEW) {
    /* The first id: the whole first table is written in now. */
    hs_populate_once(&first_populated, f, FIRST_BYTES);
    uint64_t n;
    if (hs_single_threaded()) {
      n = __atomic_load_n(&first_count, __ATOMIC_RELAXED) + 1;
      __atomic_store_n(&first_count, n, __ATOMIC_RELAXED);
    } else {
      n = __atomic_add_fetch(&first_count, 1, __ATOMIC_RELAXED);
    }
    if (n >= FIRST_CAP)
      __atomic_store_n(&first_open, 0, __ATOMIC_RELAXED);
    return in;
  }
  return probe(__atomic_load_n(&table, __ATOMIC_ACQUIRE), TABLE_SLOTS - 1, id, 1);
}
