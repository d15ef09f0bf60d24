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
  hs_record_alloc(p, booked(n));
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
    hs_record_alloc(p, booked(total));
  return p;
}

static void *w_realloc(void *ctx, void *old, size_t n) {
  struct py_allocator *a = ctx;
  struct hs_thread *t = &hs_thread_state;
  hs_record_free(old); /* as the realloc hook: before, so the address cannot be reused first */
  int saved = t->guard;
  t->guard = 1;
  void *p = a->realloc(a->ctx, old, n);
  t->guard = saved;
  hs_record_alloc(p, booked(n));
  return p;
}

static void w_free(void *ctx, void *p) {
  struct py_allocator *a = ctx;
  struct hs_thread *t = &hs_thread_state;
  hs_record_free(p);
  int saved = t->guard;
  t->guard = 1;
  a->free(a->ctx, p);
  t->guard = saved;
}

int hs_pymem_install(void) {
  /* A set-id program: secure_getenv hides what Python itself may still
   * read, so we cannot tell whether PYTHONMALLOC is set; stay out. */
  if (getauxval(AT_SECURE))
    return 0;
  const char *env = secure_getenv("PYTHONMALLOC");
  if (env && *env)
    return 0;
  is_initialized_fn initialized = (is_initialized_fn)hs_py_symbol("Py_IsInitialized");
  get_allocator_fn get = (get_allocator_fn)hs_py_symbol("PyMem_GetAllocator");
  set_allocator_fn set = (set_allocator_fn)hs_py_symbol("PyMem_SetAllocator");
  if (!initialized || !get || !set || initialized())
    return 0;
  static const int domains[] = {PY_DOMAIN_MEM, PY_DOMAIN_OBJ};
  for (unsigned i = 0; i < sizeof domains / sizeof domains[0]; i++) {
    int d = domains[i];
    get(d, &previous[d]);
    if (!previous[d].malloc || !previous[d].calloc || !previous[d].realloc || !previous[d].free)
      return 0;
  }
  for (unsigned i = 0; i < sizeof domains / sizeof domains[0]; i++) {
    int d = domains[i];
    struct py_allocator w = {&previous[d], w_malloc, w_calloc, w_realloc, w_free};
    set(d, &w);
  }
  return 1;
}
