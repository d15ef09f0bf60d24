/*
 * maps.c: the memory malloc never sees (maps.h; docs/mmap-heaps.md). The
 * program's own anonymous private mappings (all mappings with
 * HS_CFG_MMAP_FILES) are heap `mmap`, what its brk and sbrk add to the data
 * segment is heap `brk`.
 *
 * Sampling. By bytes, with the thread's malloc countdown (the countdown is
 * memoryless per byte, so sharing it leaves each heap unbiased, as for
 * Python's heap: record.h). A mapping is booked at its start with its length
 * rounded up to the page, what the kernel maps; a brk range to the byte.
 * PROT_NONE mappings are reservations, not memory: kept in the table as
 * such (no record), and booked part by part when mprotect makes them
 * accessible (V8 commits its pages so); mprotect back to PROT_NONE ends a
 * booked part and makes it a reservation again, and so does madvise when
 * it gives the pages back (MADV_DONTNEED, MADV_FREE, MADV_REMOVE): mapped
 * still, they are no longer the program's memory.
 *
 * Ranges. munmap, mremap and brk act on address ranges, not on the results
 * of earlier calls, so the sampled ranges are kept here in a table (a
 * bounded spinlock, never held across an unwind, a ring write or a system
 * call but the table's own first mmap). A booked range that an unmap cuts is
 * freed whole, and each part of it left mapped is booked again at its own
 * start, with the same stack and the same weight per byte (a runtime that
 * maps twice the size it needs and trims the head and tail to align it
 * keeps the middle). mremap moves the booked bytes it keeps (their stack,
 * their weight), drops those past its new end, and books the bytes it adds
 * to a booked range as a new allocation of its own caller. A new mapping
 * over booked bytes (MAP_FIXED) ends them first.
 *
 * Ordering. An unmap's frees are written before the real munmap, so that
 * the addresses cannot be mapped again (and booked) before their free's
 * sequence number is taken; a mapping's record after the real mmap.
 *
 * Not counted twice. The guard (state.h) is held while the client and
 * pymalloc's wrappers (pymem.c) run, and while pymalloc maps an arena (its
 * arena allocator, wrapped there too): pymalloc's arenas are in Python's heap.
 * glibc's malloc maps its large blocks and grows its brk heap through
 * internal calls that never reach a hook. Another allocator interposed as
 * malloc from a shared object (jemalloc, tcmalloc) calls mmap through the
 * PLT: its calls are known by their return address, in the text of the
 * object that holds malloc (alloc_lo, alloc_hi), and skipped.
 */
#include "maps.h"

#include <errno.h>
#include <link.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "labels.h"
#include "own.h"
#include "real.h"
#include "record.h"
#include "ring.h"
#include "wire.h"

struct range {
  uint64_t start, end;  /* [start, end) */
  uint64_t sample_size; /* bytes it stands for */
  uint64_t stack_id;
  uint32_t heap;      /* HS_MMAP_HEAP_ID or HS_BRK_HEAP_ID; RESERVED: not booked */
  uint32_t label_set; /* the mapper's labels when booked: its pieces keep them */
};

/* An anonymous PROT_NONE range (address space a runtime reserved): not
 * memory until mprotect makes it accessible, which books it then. */
#define RESERVED 0u
/* What take() takes: any range, or only those of one kind. */
enum { TAKE_ANY, TAKE_RESERVED, TAKE_BOOKED };

/* At most this many booked ranges live at once; past it a sample is not
 * booked and counted in addr_table_full (as malloc's address set does). */
#define MAX_RANGES 16384u
/* Ranges one step of an unmap takes out of the table (it loops). */
#define TAKE_BATCH 32u

static struct range *ranges; /* MAX_RANGES, mapped at the first booking */
static uint32_t nranges;     /* ranges[0, nranges) are live, under lock */
static uint64_t lo = UINT64_MAX, hi; /* their span, for a lock-free "none here" */
static uint32_t lock;

static struct hs_seq_line mmap_seq, brk_seq;
static int announced[2]; /* per heap: 0 no, 1 being announced, 2 yes */
static uint32_t session_flags;
static uintptr_t alloc_lo, alloc_hi; /* text of an interposed allocator, or empty */

#define SPINS_BEFORE_YIELD 128
#define MAX_YIELDS 10000

static int lock_bounded(void) {
  for (unsigned i = 0; i < SPINS_BEFORE_YIELD + MAX_YIELDS; i++) {
    if (!__atomic_load_n(&lock, __ATOMIC_RELAXED) && !__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
      return 1;
    if (i < SPINS_BEFORE_YIELD)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  __atomic_fetch_add(&hs_session.ring.meta->dropped_records, 1, __ATOMIC_RELAXED);
  return 0;
}

static void unlock(void) { __atomic_store_n(&lock, 0, __ATOMIC_RELEASE); }

static uint64_t page_up(uint64_t n) {
  uint64_t page = hs_page_size ? hs_page_size : 4096;
  return n + page - 1 < n ? n : (n + page - 1) & ~(page - 1);
}

static int allocators_own(const void *caller) {
  return (uintptr_t)caller - alloc_lo < alloc_hi - alloc_lo;
}

/* ---- the heaps' records ---- */

static struct hs_seq_line *seq_of(uint32_t heap) { return heap == HS_BRK_HEAP_ID ? &brk_seq : &mmap_seq; }

/* The heap's HS_REC_HEAP, once per session, before its first record. */
static int announce(uint32_t heap) {
  int *state = &announced[heap == HS_BRK_HEAP_ID];
  int st = __atomic_load_n(state, __ATOMIC_ACQUIRE);
  if (st == 2)
    return 1;
  if (st == 1 || !__atomic_compare_exchange_n(state, &st, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    if (st == 2)
      return 1;
    /* another thread is announcing it: this sample is lost, and counted */
    __atomic_fetch_add(&hs_session.ring.meta->dropped_records, 1, __ATOMIC_RELAXED);
    return 0;
  }
  struct hs_heap rec;
  memset(&rec, 0, sizeof rec);
  rec.interval = hs_session.interval; /* the malloc countdown's */
  rec.heap_id = heap;
  const char *name = heap == HS_BRK_HEAP_ID ? HS_BRK_HEAP_NAME : HS_MMAP_HEAP_NAME;
  memcpy(rec.name, name, strlen(name) + 1);
  int rc = hs_ring_write(&hs_session.ring, HS_REC_HEAP, &rec, sizeof rec, NULL, 0, 0);
  int ok = hs_ok(rc) && rc == HS_OK;
  __atomic_store_n(state, ok ? 2 : 0, __ATOMIC_RELEASE);
  return ok;
}

static int put_malloc(const struct range *r) {
  struct hs_ring ring = hs_session.ring;
  ring.seq = &seq_of(r->heap)->next;
  struct hs_heap_malloc rec = {.heap_id = r->heap, .addr = r->start, .sample_size = r->sample_size,
                               .alloc_size = r->end - r->start, .stack_id = r->stack_id,
                               .ts = hs_record_ns(), .label_set = r->label_set};
  int rc = hs_ring_write(&ring, HS_REC_HEAP_MALLOC, &rec, sizeof rec, NULL, 0, 1);
  return hs_ok(rc) && rc == HS_OK;
}

static void put_free(const struct range *r) {
  struct hs_ring ring = hs_session.ring;
  ring.seq = &seq_of(r->heap)->next;
  struct hs_heap_free rec = {.heap_id = r->heap, .addr = r->start, .ts = hs_record_ns()};
  (void)hs_ok(hs_ring_write(&ring, HS_REC_HEAP_FREE, &rec, sizeof rec, NULL, 0, 1));
}

/* ---- the table ---- */

static void insert(const struct range *r) {
  if (!lock_bounded())
    return;
  if (!ranges) {
    void *m = HS_REAL_MAP(mmap)(NULL, MAX_RANGES * sizeof *ranges, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      hs_own_map(m, MAX_RANGES * sizeof *ranges, HS_OWN_PRIVATE);
      ranges = m;
    }
  }
  if (ranges && nranges < MAX_RANGES) {
    ranges[nranges] = *r;
    __atomic_store_n(&nranges, nranges + 1, __ATOMIC_RELAXED);
    if (r->start < lo)
      __atomic_store_n(&lo, r->start, __ATOMIC_RELAXED);
    if (r->end > hi)
      __atomic_store_n(&hi, r->end, __ATOMIC_RELAXED);
  } else {
    /* booked, and its free will not be sent: said as for malloc's addresses */
    __atomic_fetch_add(&hs_session.ring.meta->addr_table_full, 1, __ATOMIC_RELAXED);
  }
  unlock();
}

static int of_kind(const struct range *r, int kind) {
  return kind == TAKE_ANY || (kind == TAKE_RESERVED) == (r->heap == RESERVED);
}

/* Takes out up to TAKE_BATCH ranges of a kind that meet [a, b); returns how
 * many. */
static uint32_t take(uint64_t a, uint64_t b, int kind, struct range *out) {
  uint32_t k = 0;
  if (!lock_bounded())
    return 0;
  for (uint32_t i = 0; i < nranges && k < TAKE_BATCH; i++) {
    if (ranges[i].start < b && a < ranges[i].end && of_kind(&ranges[i], kind)) {
      out[k++] = ranges[i];
      ranges[i--] = ranges[--nranges];
    }
  }
  if (nranges == 0) {
    __atomic_store_n(&lo, UINT64_MAX, __ATOMIC_RELAXED);
    __atomic_store_n(&hi, 0, __ATOMIC_RELAXED);
  }
  unlock();
  return k;
}

static int none_in(uint64_t a, uint64_t b) {
  return __atomic_load_n(&nranges, __ATOMIC_RELAXED) == 0 || b <= __atomic_load_n(&lo, __ATOMIC_RELAXED) ||
         a >= __atomic_load_n(&hi, __ATOMIC_RELAXED);
}

/* [s, e) of r booked on its own, at `at`, with r's weight per byte (a
 * reserved one kept as such). */
static void rebook(const struct range *r, uint64_t s, uint64_t e, uint64_t at) {
  if (s >= e)
    return;
  struct range piece = *r;
  piece.sample_size =
      (uint64_t)((unsigned __int128)r->sample_size * (e - s) / (r->end - r->start));
  piece.start = at;
  piece.end = at + (e - s);
  if (r->heap == RESERVED || (piece.sample_size && put_malloc(&piece)))
    insert(&piece);
}

/* r, taken out for [a, b): freed when booked, its parts outside kept. */
static void split_out(const struct range *r, uint64_t a, uint64_t b) {
  if (r->heap != RESERVED)
    put_free(r);
  rebook(r, r->start, a, r->start);
  rebook(r, b, r->end, b);
}

/* [a, b) goes: each range of the kind in it is split out. Those taken land
 * in moved, if given (up to TAKE_BATCH: mremap's). Returns how many landed
 * there. */
static uint32_t cut_kind(uint64_t a, uint64_t b, int kind, struct range *moved) {
  struct range out[TAKE_BATCH];
  uint32_t k, kept = 0;
  if (none_in(a, b))
    return 0;
  do {
    k = take(a, b, kind, out);
    for (uint32_t i = 0; i < k; i++) {
      split_out(&out[i], a, b);
      if (moved && kept < TAKE_BATCH)
        moved[kept++] = out[i];
    }
  } while (k == TAKE_BATCH);
  return kept;
}

static uint32_t cut(uint64_t a, uint64_t b, struct range *moved) { return cut_kind(a, b, TAKE_ANY, moved); }

/* A sample of len bytes at start, if the countdown reaches it. */
static void book(uint32_t heap, uint64_t start, uint64_t len) {
  struct hs_thread *t = &hs_thread_state;
  if (t->sampler.interval == 0 || t->gen != __atomic_load_n(&hs_session.gen, __ATOMIC_RELAXED))
    hs_record_thread_init(t);
  struct range r = {start, start + len, hs_sampler_sample(&t->sampler, len), 0, heap, 0};
  if (r.sample_size == 0 || !hs_record_stack(&r.stack_id) || !announce(heap))
    return;
  r.label_set = hs_labels_sample();
  if (put_malloc(&r))
    insert(&r);
}

/* ---- the hooks' slow paths ---- */

/* Each runs between enter (1: go on; not for an allocator's own call, nor
 * with the client off) and leave: under the guard, inside the session,
 * errno kept. */
static int enter(const void *caller, int *was, int *saved_errno) {
  if (allocators_own(caller))
    return 0;
  *saved_errno = errno;
  *was = hs_guard_enter(&hs_thread_state);
  if (hs_session_enter())
    return 1;
  hs_guard_leave(&hs_thread_state, *was);
  return 0;
}

static void leave(int was, int saved_errno) {
  hs_session_leave();
  hs_guard_leave(&hs_thread_state, was);
  errno = saved_errno;
}

static int counted(int flags) {
  if (session_flags & HS_CFG_MMAP_FILES)
    return 1;
  return (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE;
}

void hs_maps_mapped(void *p, size_t len, int prot, int flags, const void *caller) {
  int was, saved;
  if (!enter(caller, &was, &saved))
    return;
  uint64_t a = (uint64_t)(uintptr_t)p, n = page_up(len);
  (void)cut(a, a + n, NULL);
  if (counted(flags) && prot != PROT_NONE) {
    book(HS_MMAP_HEAP_ID, a, n);
  } else if (counted(flags)) {
    struct range r = {a, a + n, 0, 0, RESERVED, 0};
    insert(&r);
  }
  leave(was, saved);
}

/* kind TAKE_RESERVED, committed: the reserved parts of [a, b) are booked
 * (at the caller of the hook). TAKE_BOOKED, decommitted or given back: the
 * booked parts end, those of the mmap heap reserved again (a brk range given
 * back just ends). Under enter(). */
static void switch_kind(uint64_t a, uint64_t b, int kind) {
  struct range out[TAKE_BATCH];
  uint32_t k;
  do {
    k = take(a, b, kind, out);
    for (uint32_t i = 0; i < k; i++) {
      split_out(&out[i], a, b);
      uint64_t s = out[i].start > a ? out[i].start : a, e = out[i].end < b ? out[i].end : b;
      if (kind == TAKE_RESERVED && out[i].heap == RESERVED) {
        book(HS_MMAP_HEAP_ID, s, e - s);
      } else if (out[i].heap == HS_MMAP_HEAP_ID) {
        struct range r = {s, e, 0, 0, RESERVED, 0};
        insert(&r);
      }
    }
  } while (k == TAKE_BATCH);
}

/* Committed: the reserved parts are booked (at mprotect's caller).
 * Decommitted (PROT_NONE): the booked parts end and are reserved again.
 * Other ranges are not ours to judge (a JIT's W^X flips stay as they are). */
void hs_maps_protected(void *addr, size_t len, int prot, const void *caller) {
  uint64_t a = (uint64_t)(uintptr_t)addr, b = a + page_up(len);
  int was, saved;
  if (len == 0 || none_in(a, b) || !enter(caller, &was, &saved))
    return;
  switch_kind(a, b, prot == PROT_NONE ? TAKE_BOOKED : TAKE_RESERVED);
  leave(was, saved);
}

/* The pages are no longer memory of the program's (not resident, nor
 * charged to it) though still mapped: what was booked there ends and is a
 * reservation, booked again when mprotect (or a new mapping over it) makes
 * it memory. A program that reuses such pages by touching them (GCC's
 * collector does) is not seen doing so: docs/mmap-heaps.md. */
void hs_maps_given_back(void *addr, size_t len, const void *caller) {
  uint64_t a = (uint64_t)(uintptr_t)addr, b = a + page_up(len);
  int was, saved;
  if (len == 0 || none_in(a, b) || !enter(caller, &was, &saved))
    return;
  switch_kind(a, b, TAKE_BOOKED);
  leave(was, saved);
}

void hs_maps_unmapping(void *addr, size_t len, const void *caller) {
  uint64_t a = (uint64_t)(uintptr_t)addr;
  int was, saved;
  if (len == 0 || (a & (page_up(1) - 1)) || !enter(caller, &was, &saved))
    return; /* a len of 0 or an unaligned addr: the real munmap fails, nothing goes */
  (void)cut(a, a + page_up(len), NULL);
  leave(was, saved);
}

/* The part of r in [a, b), booked again at its place + shift. */
static void rebook_within(const struct range *r, uint64_t a, uint64_t b, uint64_t shift) {
  uint64_t s = r->start > a ? r->start : a, e = r->end < b ? r->end : b;
  if (s < e)
    rebook(r, s, e, s + shift);
}

void *hs_maps_remap(void *old, size_t old_len, size_t new_len, int flags, void *to,
                    const void *caller) {
  int was, saved;
  if (!enter(caller, &was, &saved))
    return HS_REAL_MAP(mremap)(old, old_len, new_len, flags, to);
  uint64_t a = (uint64_t)(uintptr_t)old, old_n = page_up(old_len), new_n = page_up(new_len);
  struct range moved[TAKE_BATCH];
  uint32_t k = cut(a, a + old_n, moved);
  errno = saved;
  void *p = HS_REAL_MAP(mremap)(old, old_len, new_len, flags, to);
  saved = errno;
  if (p == MAP_FAILED) {
    for (uint32_t i = 0; i < k; i++) /* what was booked stays so */
      rebook_within(&moved[i], a, a + old_n, 0);
  } else {
    uint64_t at = (uint64_t)(uintptr_t)p;
    (void)cut(at, at + new_n, NULL); /* MREMAP_FIXED over booked bytes */
    uint64_t kept = old_n < new_n ? old_n : new_n;
    for (uint32_t i = 0; i < k; i++) /* moved (or not) with their stack; past the new end, gone */
      rebook_within(&moved[i], a, a + kept, at - a);
    int booked = 0;
    for (uint32_t i = 0; i < k; i++)
      booked |= moved[i].heap == HS_MMAP_HEAP_ID;
    if (new_n > old_n && booked)
      book(HS_MMAP_HEAP_ID, at + old_n, new_n - old_n);
  }
  leave(was, saved);
  return p;
}

void *hs_maps_sbrk(intptr_t delta, const void *caller) {
  int was, saved;
  if (delta == 0 || !enter(caller, &was, &saved))
    return HS_REAL_MAP(sbrk)(delta);
  uint64_t cur = (uint64_t)(uintptr_t)HS_REAL_MAP(sbrk)(0);
  if (delta < 0)
    (void)cut(cur - (uint64_t)-delta, cur, NULL);
  errno = saved;
  void *p = HS_REAL_MAP(sbrk)(delta);
  saved = errno;
  if (p != (void *)-1 && delta > 0) {
    (void)cut((uint64_t)(uintptr_t)p, (uint64_t)(uintptr_t)p + (uint64_t)delta, NULL);
    book(HS_BRK_HEAP_ID, (uint64_t)(uintptr_t)p, (uint64_t)delta);
  }
  leave(was, saved);
  return p;
}

int hs_maps_brk(void *end, const void *caller) {
  int was, saved;
  if (!enter(caller, &was, &saved))
    return HS_REAL_MAP(brk)(end);
  uint64_t cur = (uint64_t)(uintptr_t)HS_REAL_MAP(sbrk)(0), to = (uint64_t)(uintptr_t)end;
  if (to < cur)
    (void)cut(to, cur, NULL);
  errno = saved;
  int rc = HS_REAL_MAP(brk)(end);
  saved = errno;
  if (rc == 0 && to > cur) {
    (void)cut(cur, to, NULL);
    book(HS_BRK_HEAP_ID, cur, to - cur);
  }
  leave(was, saved);
  return rc;
}

void hs_maps_direct(long n, long a, long b, long c, const void *caller) {
  (void)a;
  if (allocators_own(caller) || !hs_session_enter())
    return; /* entered: the meta page stays mapped meanwhile (a detach waits) */
  struct hs_ring_meta *m = hs_session.ring.meta;
  uint64_t bytes = n == SYS_mmap ? (uint64_t)b : n == SYS_mremap ? (uint64_t)c : 0;
  __atomic_fetch_add(&m->direct_map_calls, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&m->direct_map_bytes, bytes, __ATOMIC_RELAXED);
  hs_session_leave();
}

/* ---- the session ---- */

/* One pass over the loaded objects (dl_iterate_phdr: a few thousand
 * instructions; two dladdr calls cost ~180,000, a quarter of a short
 * process's time under the client, as each scans a symbol table). */
struct allocator_of {
  uintptr_t malloc_at, mmap_at; /* in: the real malloc's and mmap's addresses */
  const void *malloc_obj;       /* out: the object holding malloc (its program headers) */
  const void *mmap_obj;         /* out: the object holding mmap */
  uintptr_t lo, hi;             /* out: the span of malloc's object's executable segments */
  int main;                     /* out: malloc's object is the program itself */
};

static int find_allocator_objects(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct allocator_of *w = data;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  int has_malloc = 0, has_mmap = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD)
      continue;
    uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
    has_malloc |= w->malloc_at - s < e - s;
    has_mmap |= w->mmap_at - s < e - s;
    if ((ph->p_flags & PF_X) && s < lo)
      lo = s;
    if ((ph->p_flags & PF_X) && e > hi)
      hi = e;
  }
  if (has_mmap)
    w->mmap_obj = info->dlpi_phdr;
  if (has_malloc) {
    w->malloc_obj = info->dlpi_phdr;
    w->lo = lo;
    w->hi = hi;
    w->main = info->dlpi_name == NULL || info->dlpi_name[0] == '\0';
  }
  return w->malloc_obj && w->mmap_obj;
}

/* An allocator other than the C library's, interposed as malloc from a
 * shared object: its text. glibc's malloc never calls the hooks; one linked
 * into the program itself cannot be told from the program's own calls, so
 * its mappings are booked too (docs/mmap-heaps.md). */
static void find_allocator(void) {
  struct allocator_of w = {(uintptr_t)HS_REAL(malloc), (uintptr_t)HS_REAL_MAP(mmap), 0, 0, 0, 0, 0};
  alloc_lo = alloc_hi = 0;
  (void)dl_iterate_phdr(find_allocator_objects, &w);
  if (!w.malloc_obj || !w.mmap_obj || w.malloc_obj == w.mmap_obj || w.main || w.lo >= w.hi)
    return;
  alloc_lo = w.lo;
  alloc_hi = w.hi;
  hs_debug("mapping calls from the allocator's text are its own, from", alloc_lo);
}

void hs_maps_session(uint32_t flags) {
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t);
  session_flags = flags;
  nranges = 0;
  lo = UINT64_MAX;
  hi = 0;
  lock = 0; /* a fork child's: the thread that held it is not here */
  mmap_seq.next = 1;
  brk_seq.next = 1;
  announced[0] = announced[1] = 0;
  if (hs_real_resolve())
    find_allocator();
  hs_guard_leave(t, was);
}
