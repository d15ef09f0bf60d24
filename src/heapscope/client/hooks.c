/*
 * hooks.c: the interposed symbols, and nothing else (no logic). Each one
 * calls the real allocator and records the call (record.h).
 *
 *   malloc, calloc, realloc: whether the allocation can be recorded is
 *            known before the real call (hs_alloc_unrecorded needs only the
 *            size); when it cannot, the hook ends in a jump to the real
 *            function (nothing to save, no frame of ours left under it),
 *            else an out-of-line *_recorded function does the call and
 *            hs_record_alloc_slow.
 *   free:    record the free BEFORE the real free, so that the freed address
 *            cannot be handed out again (and recorded) before this free's
 *            sequence number is taken. An address that is not in the
 *            filter of sampled addresses (where the bootstrap arena is
 *            pinned, addrset.h) costs one load, one bit test and one branch,
 *            then a jump to the real free.
 *   realloc: record free(old) -> real realloc -> record alloc(new, size).
 *   calloc:  size = n * size; on overflow only the real calloc runs (it fails).
 *   pvalloc: size rounded up to the page, as the allocator does.
 *
 * malloc_usable_size: the arena answers for its own pointers.
 *
 * Pointers from the bootstrap arena (real.h) are never passed to the real
 * allocator: free ignores them, realloc copies them out.
 */
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "cfa.h"
#include "modules.h"
#include "real.h"
#include "record.h"
#include "stacks.h"
#include "state.h"

#define HS_COLD_PATH __attribute__((noinline, cold))

static HS_COLD_PATH void *malloc_recorded(size_t size) {
  void *p = HS_REAL(malloc)(size);
  return hs_record_alloc_slow(p, size); /* a tail call */
}

HS_EXPORT void *malloc(size_t size) {
  if (HS_LIKELY(hs_alloc_unrecorded(size)))
    return HS_REAL(malloc)(size);
  return malloc_recorded(size);
}

HS_EXPORT void free(void *p) {
  /* The arena's granules are pinned in the filter (hs_real_resolve), so one
   * test covers both. */
  if (HS_UNLIKELY(hs_addr_maybe_sampled(p))) {
    hs_free_checked(p); /* record.c: a tail call */
    return;
  }
  HS_REAL(free)(p);
}

static HS_COLD_PATH void *calloc_recorded(size_t n, size_t size, size_t total) {
  void *p = HS_REAL(calloc)(n, size);
  return hs_record_alloc_slow(p, total); /* a tail call */
}

HS_EXPORT void *calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total))
    return HS_REAL(calloc)(n, size);
  if (HS_LIKELY(hs_alloc_unrecorded(total)))
    return HS_REAL(calloc)(n, size);
  return calloc_recorded(n, size, total);
}

static void *realloc_from_arena(void *old, size_t size) {
  void *p = HS_REAL(malloc)(size);
  if (p) {
    size_t n = hs_arena_size(old);
    memcpy(p, old, n < size ? n : size);
  }
  hs_record_alloc(p, size);
  return p;
}

static HS_COLD_PATH void *realloc_recorded(void *old, size_t size) {
  void *p = HS_REAL(realloc)(old, size);
  return hs_record_alloc_slow(p, size); /* a tail call */
}

/* The real realloc, then the new block recorded if the countdown reaches it. */
static inline __attribute__((always_inline)) void *realloc_sized(void *old, size_t size) {
  if (HS_LIKELY(hs_alloc_unrecorded(size)))
    return HS_REAL(realloc)(old, size);
  return realloc_recorded(old, size);
}

/* old's granule is in the filter: a sampled address, an arena pointer (the
 * arena is pinned there) or a false positive. */
static HS_COLD_PATH void *realloc_checked(void *old, size_t size) {
  if (hs_arena_owns(old))
    return realloc_from_arena(old, size);
  hs_record_free_slow(old);
  return realloc_sized(old, size);
}

/* As free: one filter test covers the arena and the sampled addresses (and
 * NULL, whose granule is never sampled nor pinned: it only goes to
 * realloc_checked on an alias, which takes it as hs_free_checked would). The
 * rest out of line, so that the common path keeps no frame and ends in a
 * jump (36 instructions to the real realloc, now 24). */
HS_EXPORT void *realloc(void *old, size_t size) {
  if (HS_UNLIKELY(hs_addr_maybe_sampled(old)))
    return realloc_checked(old, size);
  return realloc_sized(old, size);
}

HS_EXPORT void *reallocarray(void *old, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM; /* what the real one does; old stays valid */
    return NULL;
  }
  if (old && hs_arena_owns(old))
    return realloc_from_arena(old, total);
  /* glibc's reallocarray calls realloc through the PLT, i.e. our hook,
   * which would record it twice: call the real realloc ourselves. */
  hs_record_free(old);
  void *p = HS_REAL(realloc)(old, total);
  hs_record_alloc(p, total);
  return p;
}

HS_EXPORT int posix_memalign(void **out, size_t align, size_t size) {
  int rc = HS_REAL(posix_memalign)(out, align, size);
  if (rc == 0)
    hs_record_alloc(*out, size);
  return rc;
}

HS_EXPORT void *aligned_alloc(size_t align, size_t size) {
  void *p = HS_REAL(aligned_alloc)(align, size);
  hs_record_alloc(p, size);
  return p;
}

HS_EXPORT void *memalign(size_t align, size_t size) {
  void *p = HS_REAL(memalign)(align, size);
  hs_record_alloc(p, size);
  return p;
}

HS_EXPORT void *valloc(size_t size) {
  void *p = HS_REAL(valloc)(size);
  hs_record_alloc(p, size);
  return p;
}

HS_EXPORT void *pvalloc(size_t size) {
  void *p = HS_REAL(pvalloc)(size);
  size_t page = hs_page_size;
  size_t rounded = size + page - 1 < size ? size : (size + page - 1) & ~(page - 1);
  hs_record_alloc(p, rounded);
  return p;
}

/* The arena's pointers have their own size; everything else is the real
 * allocator's business (a jemalloc behind us answers for its own). */
HS_EXPORT size_t malloc_usable_size(void *p) {
  if (hs_arena_owns(p))
    return hs_arena_size(p);
  return HS_REAL(malloc_usable_size)(p);
}

/* Hidden aliases: inside this library `&malloc` may resolve to the first
 * malloc of the global scope (libc's, when we were dlopen()ed rather than
 * preloaded); inject.c needs the addresses of ours. One per member of the
 * family (family.h). */
#define HS_HOOK_ALIAS(ret, name, params, required)          \
  extern ret hs_hook_##name params                         \
      __attribute__((alias(#name), copy(name), visibility("hidden")));
HS_MALLOC_FAMILY(HS_HOOK_ALIAS)
#undef HS_HOOK_ALIAS

/* The program's dlclose, through ours: when it unloads an object, the stacks
 * interned so far are not taken for those of the same pcs from now on
 * (hs_stacks_new_generation), and the unwinder's cached rules of the unloaded
 * code go. A library loaded at those addresses later is then seen at its
 * first stack (hs_modules_check), even one whose pcs are the very ones of a
 * stack of the object unloaded (a plugin rebuilt and loaded again, called
 * from the same place). Without it (the client attached by dlopen, where the
 * program's calls are bound already) such a library is seen at its first
 * stack of new pcs. */
typedef int (*dlclose_fn)(void *);
static dlclose_fn next_dlclose;

HS_EXPORT int dlclose(void *handle) {
  dlclose_fn next = __atomic_load_n(&next_dlclose, __ATOMIC_RELAXED);
  if (next == NULL) {
    struct hs_thread *t = &hs_thread_state;
    int was = hs_guard_enter(t); /* dlsym allocates: not sampled */
    next = (dlclose_fn)dlsym(RTLD_NEXT, "dlclose");
    hs_guard_leave(t, was);
    if (next == NULL)
      return -1; /* no loader to close with: nothing was open */
    __atomic_store_n(&next_dlclose, next, __ATOMIC_RELAXED);
  }
  unsigned long long before = hs_modules_loader_subs();
  int rc = next(handle);
  if (hs_modules_loader_subs() != before) {
    hs_stacks_new_generation();
    hs_cfa_note_unload();
  }
  return rc;
}
