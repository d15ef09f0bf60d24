/* pymem.c: see pymem.h. */
#include "pymem.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "pyframes.h"
#include "record.h"
#include "state.h"

/* PyMemAllocatorEx and the domains, as in CPython's Include/cpython/pymem.h
 * (the same from 3.5 to 3.13). */
struct py_allocator {
  void *ctx;
  void *(*malloc)(void *ctx, size_t size);
  void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
  void *(*realloc)(void *ctx, void *ptr, size_t new_size);
  void (*free)(void *ctx, void *ptr);
};
enum { PY_DOMAIN_RAW = 0, PY_DOMAIN_MEM = 1, PY_DOMAIN_OBJ = 2 };

typedef void (*get_allocator_fn)(int domain, struct py_allocator *out);
typedef void (*set_allocator_fn)(int domain, struct py_allocator *in);
typedef int (*is_initialized_fn)(void);

/* One wrapped domain: the allocator we wrap, and the largest request its
 * allocator serves without calling malloc for it (`direct`, 0 when that is
 * not known). Each wrapper's ctx points at its own entry. Written before
 * Py_Initialize or with the GIL held, before the wrappers go in; read only
 * after. */
struct py_domain {
  struct py_allocator prev;
  size_t direct;
  size_t fast; /* min(direct, interval - 1): the requests of the fast path (hs_pymem_session) */
};
static struct py_domain wrapped[3];

/* Largest request pymalloc serves from its own pools in 3.8-3.13
 * (SMALL_REQUEST_THRESHOLD in Objects/obmalloc.c); a request of 0 bytes or
 * a larger one goes on to PyMem_RawMalloc, i.e. malloc. */
#define PYMALLOC_SMALL 512u

/* Python asks for 0 bytes as for 1 (PyMem_Malloc(0) returns a unique pointer). */
static size_t booked(size_t n) {
  return n ? n : 1;
}

/* The hot paths (the cost per call). A request the wrapped allocator serves
 * itself (1 to `direct` bytes) and smaller than the sampling interval (both
 * in `fast`) that the countdown does not reach costs the countdown
 * decrement and a jump to that allocator (a tail call: no frame of ours, no
 * guard). The countdown is this thread's malloc countdown (record.h); a
 * thread that has not sampled yet has countdown 0 and goes the slow way,
 * which sets it up. As the malloc hook's fast path, this one leaves the
 * guard to the slow path (hs_record_py_alloc_slow drops a sample taken
 * under it); unlike it, it does not look at hs_enabled either: the slow
 * path does, and a stock pymalloc never calls a domain back while the guard
 * is set (it calls no allocator but malloc), so the only difference is the
 * countdown moving while the client is off. Every other request (larger than
 * `direct`, any request of an allocator we do not know, a request the
 * countdown reaches) is made with the reentrancy guard set, so the malloc
 * hook does not count what the allocator passes on to malloc a second
 * time; it is booked here.
 *
 * Two sets of wrappers. The stock pymalloc (stock_pymalloc) has no context
 * and the same functions in both domains: its wrappers (s_*) are installed
 * with a NULL context too, keep what they wrap in one static entry
 * (`stock`) and pass their own context, NULL, on as pymalloc's, so that a
 * fast path is the size test, the countdown and a jump through a static
 * pointer (10 instructions, 13 with the entry in ctx). Any other allocator
 * (the debug hooks, tracemalloc, mimalloc, an embedder's) gets the w_*
 * wrappers, whose context is the domain's entry in `wrapped`. */
static struct py_domain stock;

/* The client is off (its session ended; before a session starts no Python
 * runs): the countdown is set one mean interval away, so that this thread's
 * requests take the fast path again, and still reach the slow path now and
 * then, where a later session (an attach after a detach) sets the thread's
 * sampler up afresh (record.c). A fork child's new session sets its one
 * thread's countdown afresh (session.c, restart_in_child). */
static inline void park_if_off(void) {
  struct hs_sampler *s = &hs_thread_state.sampler;
  if (HS_UNLIKELY(!__atomic_load_n(&hs_enabled, __ATOMIC_RELAXED)))
    s->countdown = s->interval ? (int64_t)s->interval : (int64_t)1 << 20;
}

static inline __attribute__((always_inline)) void *malloc_guarded(struct py_domain *d, size_t n) {
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t); /* what pymalloc passes on to malloc is this request, not another */
  void *p = d->prev.malloc(d->prev.ctx, n);
  hs_guard_leave(t, was);
  hs_record_py_alloc(p, booked(n));
  park_if_off();
  return p;
}

/* 1 when n bytes are certainly not sampled (and then consumed): n is in
 * the fast range (1 <= n <= fast < interval) and below the countdown, which
 * so stays above 0. The countdown is compared before it is changed: a load,
 * a compare and a subtract in place, against a load, a subtract, a test and
 * a store. */
static inline __attribute__((always_inline)) int py_fast(const struct py_domain *d, size_t n) {
  /* n - 1 < fast: 1 <= n <= fast (0 wraps around). */
  if (n - 1 >= d->fast)
    return 0;
  int64_t *countdown = &hs_thread_state.sampler.countdown;
  if (HS_UNLIKELY((int64_t)n >= *countdown))
    return 0;
  *countdown -= (int64_t)n;
  return 1;
}

static __attribute__((noinline)) void *w_malloc_guarded(struct py_domain *d, size_t n) {
  return malloc_guarded(d, n);
}

/* The stock wrappers' slow paths take the wrapper's arguments as they are
 * (no register moves on the fast path). */
static __attribute__((noipa)) void *s_malloc_guarded(void *ctx, size_t n) {
  (void)ctx;
  return malloc_guarded(&stock, n);
}

static void *w_malloc(void *ctx, size_t n) {
  struct py_domain *d = ctx;
  if (HS_LIKELY(py_fast(d, n)))
    return d->prev.malloc(d->prev.ctx, n);
  return w_malloc_guarded(d, n);
}

static void *s_malloc(void *ctx, size_t n) {
  if (HS_LIKELY(py_fast(&stock, n)))
    return stock.prev.malloc(ctx, n); /* ctx: NULL, pymalloc's */
  return s_malloc_guarded(ctx, n);
}

static inline __attribute__((always_inline)) void *calloc_guarded(struct py_domain *d, size_t nelem,
                                                                  size_t elsize) {
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t);
  void *p = d->prev.calloc(d->prev.ctx, nelem, elsize);
  hs_guard_leave(t, was);
  size_t total;
  if (p && !__builtin_mul_overflow(nelem, elsize, &total))
    hs_record_py_alloc(p, booked(total));
  park_if_off();
  return p;
}

static __attribute__((noinline)) void *w_calloc_guarded(struct py_domain *d, size_t nelem,
                                                       size_t elsize) {
  return calloc_guarded(d, nelem, elsize);
}

static __attribute__((noipa)) void *s_calloc_guarded(void *ctx, size_t nelem, size_t elsize) {
  (void)ctx;
  return calloc_guarded(&stock, nelem, elsize);
}

static void *w_calloc(void *ctx, size_t nelem, size_t elsize) {
  struct py_domain *d = ctx;
  size_t total;
  if (!__builtin_mul_overflow(nelem, elsize, &total) && py_fast(d, total))
    return d->prev.calloc(d->prev.ctx, nelem, elsize);
  return w_calloc_guarded(d, nelem, elsize);
}

static void *s_calloc(void *ctx, size_t nelem, size_t elsize) {
  size_t total;
  if (!__builtin_mul_overflow(nelem, elsize, &total) && py_fast(&stock, total))
    return stock.prev.calloc(ctx, nelem, elsize);
  return s_calloc_guarded(ctx, nelem, elsize);
}

static inline __attribute__((always_inline)) void *realloc_guarded(struct py_domain *d, void *old,
                                                                   size_t n) {
  struct hs_thread *t = &hs_thread_state;
  hs_record_py_free(old); /* as the realloc hook: before, so the address cannot be reused first */
  int was = hs_guard_enter(t); /* a realloc may move any block to or from malloc */
  void *p = d->prev.realloc(d->prev.ctx, old, n);
  hs_guard_leave(t, was);
  hs_record_py_alloc(p, booked(n));
  return p;
}

static void *w_realloc(void *ctx, void *old, size_t n) {
  return realloc_guarded(ctx, old, n);
}

static __attribute__((noipa)) void *s_realloc_guarded(void *ctx, void *old, size_t n) {
  (void)ctx;
  return realloc_guarded(&stock, old, n);
}

/* The stock realloc's fast path: an unsampled block (the filter: nothing to
 * take out of the address set) resized to a size of the fast range that the
 * countdown does not reach. The countdown is decided before the call, as
 * py_fast does (the guarded path decides after it: the same bytes, the same
 * draw, since nothing between moves this thread's countdown). The guard
 * stays: pymalloc passes a block it did not carve on to realloc(). */
static void *s_realloc(void *ctx, void *old, size_t n) {
  if (HS_UNLIKELY(hs_addr_maybe_sampled(old)) || !py_fast(&stock, n))
    return s_realloc_guarded(ctx, old, n);
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t);
  void *p = stock.prev.realloc(ctx, old, n);
  hs_guard_leave(t, was);
  return p;
}

/* A free needs no guard: freeing allocates nothing, and what pymalloc's
 * free passes on to free() (a block it did not carve itself: one over
 * `direct` bytes that it took from malloc, or one allocated with malloc and
 * freed through this domain) is the malloc hook's to see: a block it
 * sampled is a malloc heap block (an earlier guard here hid such frees:
 * they stayed live in the profile). A block of this heap was taken out of
 * the address set under its own key first. */
static __attribute__((noinline, cold)) void w_free_sampled(struct py_domain *d, void *p) {
  hs_record_py_free_slow(p);
  d->prev.free(d->prev.ctx, p);
}

/* An unsampled free (the cost per call): the filter test (hs_record_py_free),
 * then a jump to the wrapped free. */
static void w_free(void *ctx, void *p) {
  struct py_domain *d = ctx;
  if (HS_UNLIKELY(hs_addr_maybe_sampled(p))) {
    w_free_sampled(d, p);
    return;
  }
  d->prev.free(d->prev.ctx, p);
}

static void s_free(void *ctx, void *p) {
  if (HS_UNLIKELY(hs_addr_maybe_sampled(p))) {
    w_free_sampled(&stock, p);
    return;
  }
  stock.prev.free(ctx, p);
}

/* PyObjectArenaAllocator (Include/cpython/objimpl.h, the same from 3.4 on):
 * what pymalloc maps its arenas with, and (3.11 on) the interpreter its
 * frame stack's chunks. */
struct py_arena_allocator {
  void *ctx;
  void *(*alloc)(void *ctx, size_t size);
  void (*free)(void *ctx, void *ptr, size_t size);
};
typedef void (*arena_allocator_fn)(struct py_arena_allocator *);

static struct py_arena_allocator arena_prev;
static size_t arena_size; /* pymalloc's ARENA_SIZE; 0: not wrapped */

/* pymalloc's arenas hold its objects, booked in Python's heap as they are
 * carved out: an arena is mapped under the guard, so that the mmap heap
 * does not count it a second time (the fast paths above call pymalloc
 * without the guard, and a request there may need a new arena). Arenas
 * are told by their size, ARENA_SIZE: the frame stack's chunks (16 KiB
 * times a power of two) are in no other heap and stay the mmap heap's. A
 * chunk of exactly ARENA_SIZE (a frame of 64k slots) would be missed. The
 * free needs no wrapper: an unmap ends only what was booked. */
static void *arena_alloc(void *ctx, size_t size) {
  if (size != arena_size)
    return arena_prev.alloc(ctx, size);
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t);
  void *p = arena_prev.alloc(ctx, size);
  hs_guard_leave(t, was);
  return p;
}

/* Puts arena_alloc in front of pymalloc's arena allocator (stock pymalloc
 * only: there ARENA_SIZE is known, 1 MiB from 3.10 on 64-bit platforms,
 * 256 KiB before). As wrap_domains: before Py_Initialize or with the GIL. */
static void wrap_arenas(void) {
  arena_allocator_fn get = (arena_allocator_fn)hs_py_symbol("PyObject_GetArenaAllocator");
  arena_allocator_fn set = (arena_allocator_fn)hs_py_symbol("PyObject_SetArenaAllocator");
  struct py_arena_allocator now;
  memset(&now, 0, sizeof now);
  if (!get || !set)
    return;
  get(&now);
  if (!now.alloc || !now.free || now.alloc == arena_alloc)
    return;
  arena_prev = now;
  arena_size = hs_py_hexversion() >= 0x030a0000 && sizeof(void *) > 4 ? (size_t)1 << 20 : (size_t)1 << 18;
  struct py_arena_allocator w = {now.ctx, arena_alloc, now.free};
  set(&w);
}

typedef int (*add_pending_fn)(int (*fn)(void *), void *arg);

static set_allocator_fn set_fn;
static get_allocator_fn get_fn;
static const int domains[] = {PY_DOMAIN_MEM, PY_DOMAIN_OBJ};
#define NDOMAINS (sizeof domains / sizeof domains[0])

/* The MEM and OBJ domains are CPython's own pymalloc, as in a release build
 * with PYTHONMALLOC unset: then a request of 1 to PYMALLOC_SMALL bytes never
 * reaches malloc (what pymalloc mallocs for itself then, its table of
 * arenas, is an allocation of its own and is seen as one). Told from the
 * allocators themselves (_PyMem_GetCurrentAllocatorName takes a lock that
 * 3.12 creates only in Py_Initialize): both domains hold the same functions
 * with no context, inside CPython, and not RAW's (malloc). The others are
 * told apart: the debug hooks and tracemalloc's have a context, CPython's
 * malloc allocator is RAW's, 3.13's mimalloc has functions of its own per
 * domain; an allocator from outside CPython, or a CPython whose threshold
 * we have not read, is not trusted. */
static int stock_pymalloc(const struct py_allocator *mem, const struct py_allocator *obj) {
  unsigned long v = hs_py_hexversion();
  if (v < 0x03080000 || v >= 0x030e0000)
    return 0;
  if (mem->ctx || obj->ctx || mem->malloc != obj->malloc || mem->calloc != obj->calloc ||
      mem->realloc != obj->realloc || mem->free != obj->free)
    return 0;
  struct py_allocator raw;
  memset(&raw, 0, sizeof raw);
  get_fn(PY_DOMAIN_RAW, &raw);
  if (raw.malloc == obj->malloc || raw.calloc == obj->calloc)
    return 0;
  Dl_info ours, cpython;
  return dladdr((void *)obj->malloc, &ours) && dladdr((void *)get_fn, &cpython) &&
         ours.dli_fbase == cpython.dli_fbase;
}

/* The largest request of the fast path: one the allocator serves itself
 * and that is below the interval (one of `interval` bytes or more is always
 * sampled, whatever the countdown says: sampler.h). */
static size_t fast_limit(size_t direct, uint64_t interval) {
  if (interval == 0)
    return 0;
  return interval - 1 < direct ? (size_t)(interval - 1) : direct;
}

void hs_pymem_session(uint64_t interval) {
  for (unsigned i = 0; i < NDOMAINS; i++) {
    struct py_domain *d = &wrapped[domains[i]];
    __atomic_store_n(&d->fast, fast_limit(d->direct, interval), __ATOMIC_RELAXED);
  }
  __atomic_store_n(&stock.fast, fast_limit(stock.direct, interval), __ATOMIC_RELAXED);
}

/* Reads the allocators in place and puts the wrappers in front of them.
 * Either before Py_Initialize (no other thread runs Python) or with the GIL
 * held: the MEM and OBJ domains are only called with the GIL, so no thread
 * is between reading a domain's ctx and its function while we write them. */
static int wrap_domains(void) {
  for (unsigned i = 0; i < NDOMAINS; i++) {
    int d = domains[i];
    struct py_allocator *prev = &wrapped[d].prev;
    get_fn(d, prev);
    if (!prev->malloc || !prev->calloc || !prev->realloc || !prev->free)
      return 0;
    if (prev->malloc == w_malloc || prev->malloc == s_malloc)
      return 0; /* ours already (a second install): never wrap a wrapper */
  }
  int pymalloc = stock_pymalloc(&wrapped[PY_DOMAIN_MEM].prev, &wrapped[PY_DOMAIN_OBJ].prev);
  size_t direct = pymalloc ? PYMALLOC_SMALL : 0;
  hs_debug("python domains: requests served without the guard up to", direct);
  if (pymalloc) {
    /* Both domains hold the same allocator (stock_pymalloc): one entry. */
    stock.prev = wrapped[PY_DOMAIN_OBJ].prev;
    stock.direct = direct;
    stock.fast = fast_limit(direct, hs_session.interval);
    wrap_arenas();
  }
  for (unsigned i = 0; i < NDOMAINS; i++) {
    int d = domains[i];
    wrapped[d].direct = direct;
    wrapped[d].fast = fast_limit(direct, hs_session.interval);
    struct py_allocator w = {&wrapped[d], w_malloc, w_calloc, w_realloc, w_free};
    if (pymalloc)
      w = (struct py_allocator){NULL, s_malloc, s_calloc, s_realloc, s_free};
    set_fn(d, &w);
  }
  return 1;
}

static hs_pymem_late_fn late_done;
static int late_state; /* 0 none, 1 pending, 2 ran (installed or not) */

/* Runs as a pending call: on the main thread, between two bytecodes, with
 * the GIL held (Py_AddPendingCall's promise). Returns 0: no Python error. */
static int install_pending(void *arg) {
  (void)arg;
  if (__atomic_exchange_n(&late_state, 2, __ATOMIC_ACQ_REL) != 1)
    return 0;
  hs_pymem_late_fn done = late_done;
  if (done && done(-1) == 0)
    return 0; /* the session is over: leave the allocators alone */
  int ok = wrap_domains();
  if (done)
    (void)done(ok);
  return 0;
}

int hs_pymem_install_now(hs_pymem_late_fn late) {
  if (getauxval(AT_SECURE))
    return 0; /* as hs_pymem_install */
  get_fn = (get_allocator_fn)hs_py_symbol("PyMem_GetAllocator");
  set_fn = (set_allocator_fn)hs_py_symbol("PyMem_SetAllocator");
  if (!get_fn || !set_fn || __atomic_load_n(&late_state, __ATOMIC_ACQUIRE) != 0)
    return 0;
  __atomic_store_n(&late_state, 2, __ATOMIC_RELEASE); /* one install per process */
  if (late && late(-1) == 0)
    return 0;
  return wrap_domains();
}

int hs_pymem_install(hs_pymem_late_fn late) {
  /* A set-id program: secure_getenv hides what Python itself may still
   * read, so we cannot tell whether PYTHONMALLOC is set; stay out. */
  if (getauxval(AT_SECURE))
    return 0;
  is_initialized_fn initialized = (is_initialized_fn)hs_py_symbol("Py_IsInitialized");
  get_fn = (get_allocator_fn)hs_py_symbol("PyMem_GetAllocator");
  set_fn = (set_allocator_fn)hs_py_symbol("PyMem_SetAllocator");
  if (!initialized || !get_fn || !set_fn)
    return 0;
  if (!initialized()) {
    /* Before Py_Initialize: pre-initialization picks allocators again when
     * PYTHONMALLOC is set, over ours; then stay out. */
    const char *env = secure_getenv("PYTHONMALLOC");
    if (env && *env)
      return 0;
    return wrap_domains();
  }
  /* Running (an attach): from the main thread's eval loop, with the GIL.
   * Nothing waits for it: if the main thread never runs Python again, the
   * domains stay as they are and stats say they are not sampled. */
  add_pending_fn add = (add_pending_fn)hs_py_symbol("Py_AddPendingCall");
  if (!add || __atomic_load_n(&late_state, __ATOMIC_ACQUIRE) != 0)
    return 0;
  late_done = late;
  __atomic_store_n(&late_state, 1, __ATOMIC_RELEASE);
  if (add(install_pending, NULL) != 0) {
    __atomic_store_n(&late_state, 0, __ATOMIC_RELEASE);
    return 0;
  }
  return 2;
}
