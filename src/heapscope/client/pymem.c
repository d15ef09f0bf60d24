/* pymem.c: see pymem.h. */
#include "pymem.h"

#include <stdlib.h>
#include <sys/auxv.h>

#include "client.h"
#include "pyframes.h"

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

/* The allocators we wrap, one per domain; each wrapper's ctx points at its
 * own entry. Written once before Py_Initialize, read only after. */
static struct py_allocator previous[3];

/* Python asks for 0 bytes as for 1 (PyMem_Malloc(0) returns a unique pointer). */
static size_t booked(size_t n) {
  return n ? n : 1;
}

static void *w_malloc(void *ctx, size_t n) {
  struct py_allocator *a = ctx;
  struct hs_thread *t = &hs_thread_state;
  int saved = t->guard;
  t->guard = 1; /* what pymalloc passes on to malloc is this request, not another */
  void *p = a->malloc(a->ctx, n);
  t->guard = saved;
  hs_record_py_alloc(p, booked(n));
  return p;
}

static void *w_calloc(void *ctx, size_t nelem, size_t elsize) {
  struct py_allocator *a = ctx;
  struct hs_thread *t = &hs_thread_state;
  int saved = t->guard;
  t->guard = 1;
  void *p = a->calloc(a->ctx, nelem, elsize);
  t->guard = saved;
  size_t total;
  if (p && !__builtin_mul_overflow(nelem, elsize, &total))
    hs_record_py_alloc(p, booked(total));
  return p;
}

static void *w_realloc(void *ctx, void *old, size_t n) {
  struct py_allocator *a = ctx;
  struct hs_thread *t = &hs_thread_state;
  hs_record_py_free(old); /* as the realloc hook: before, so the address cannot be reused first */
  int saved = t->guard;
  t->guard = 1;
  void *p = a->realloc(a->ctx, old, n);
  t->guard = saved;
  hs_record_py_alloc(p, booked(n));
  return p;
}

static void w_free(void *ctx, void *p) {
  struct py_allocator *a = ctx;
  struct hs_thread *t = &hs_thread_state;
  hs_record_py_free(p);
  int saved = t->guard;
  t->guard = 1;
  a->free(a->ctx, p);
  t->guard = saved;
}

typedef int (*add_pending_fn)(int (*fn)(void *), void *arg);

static set_allocator_fn set_fn;
static get_allocator_fn get_fn;
static const int domains[] = {PY_DOMAIN_MEM, PY_DOMAIN_OBJ};
#define NDOMAINS (sizeof domains / sizeof domains[0])

/* Reads the allocators in place and puts the wrappers in front of them.
 * Either before Py_Initialize (no other thread runs Python) or with the GIL
 * held: the MEM and OBJ domains are only called with the GIL, so no thread
 * is between reading a domain's ctx and its function while we write them. */
static int wrap_domains(void) {
  for (unsigned i = 0; i < NDOMAINS; i++) {
    int d = domains[i];
    get_fn(d, &previous[d]);
    if (!previous[d].malloc || !previous[d].calloc || !previous[d].realloc || !previous[d].free)
      return 0;
    if (previous[d].malloc == w_malloc)
      return 0; /* ours already (a second install): never wrap a wrapper */
  }
  for (unsigned i = 0; i < NDOMAINS; i++) {
    int d = domains[i];
    struct py_allocator w = {&previous[d], w_malloc, w_calloc, w_realloc, w_free};
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
