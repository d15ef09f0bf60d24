/* real.c: resolution of the real allocator, and the bootstrap arena. */
#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "addrset.h"
#include "state.h"

/* Arena allocations carry a 16-byte header holding their size, so that a
 * realloc of one knows how much to copy. 16-byte aligned like malloc. */
unsigned char hs_arena[HS_ARENA_SIZE] __attribute__((aligned(64)));
static uint64_t arena_used;

static int arena_pinned;

static void *arena_alloc(size_t size, size_t align) {
  /* The free hook sends only addresses that pass the address filter to
   * hs_free_checked (record.c), which keeps arena pointers from the real
   * free: the arena's granules are pinned in the filter before its first
   * pointer exists (addrset.h; a second pin by a racing thread is the
   * same). */
  if (!__atomic_load_n(&arena_pinned, __ATOMIC_ACQUIRE)) {
    hs_addrset_pin(hs_arena, HS_ARENA_SIZE);
    __atomic_store_n(&arena_pinned, 1, __ATOMIC_RELEASE);
  }
  if (align < 16)
    align = 16;
  if (align > 4096 || (align & (align - 1)) || size > HS_ARENA_SIZE)
    return NULL;
  uint64_t old = __atomic_load_n(&arena_used, __ATOMIC_RELAXED);
  for (;;) {
    uint64_t start = (old + 16 + align - 1) & ~(uint64_t)(align - 1);
    uint64_t end = (start + size + 15) & ~(uint64_t)15;
    if (end > HS_ARENA_SIZE)
      return NULL; /* only ever hit if the loader needs > 64 KiB to resolve */
    if (__atomic_compare_exchange_n(&arena_used, &old, end, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      uint64_t sz = size;
      memcpy(hs_arena + start - 16, &sz, sizeof sz);
      return hs_arena + start; /* static storage: already zeroed, never reused */
    }
  }
}

size_t hs_arena_size(const void *p) {
  uint64_t sz;
  memcpy(&sz, (const unsigned char *)p - 16, sizeof sz);
  return (size_t)sz;
}

#define HS_BOOT_DECL(ret, name, params, required) static ret boot_##name params;
HS_MALLOC_FAMILY(HS_BOOT_DECL)
#undef HS_BOOT_DECL

struct hs_real_fns hs_real = {
#define HS_BOOT_INIT(ret, name, params, required) boot_##name,
    HS_MALLOC_FAMILY(HS_BOOT_INIT)
#undef HS_BOOT_INIT
};

enum { UNRESOLVED = 0, RESOLVING = 1, RESOLVED = 2, FAILED = 3 };
static int resolve_state;

int hs_real_resolve(void) {
  int st = __atomic_load_n(&resolve_state, __ATOMIC_ACQUIRE);
  if (st == RESOLVED)
    return 1;
  if (st != UNRESOLVED)
    return 0; /* being resolved (maybe by this very thread, inside dlsym) */
  if (!__atomic_compare_exchange_n(&resolve_state, &st, RESOLVING, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return st == RESOLVED;
  /* Guard: dlsym allocates (its error buffer, the loader's scope lists). Our
   * hooks must not try to sample those calls; they land in boot_* anyway,
   * which serve them from the arena. */
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t);
  struct hs_real_fns r;
  int missing = 0;
#define HS_LOOKUP(ret, name, params, required)        \
  r.name = (ret(*) params)dlsym(RTLD_NEXT, #name);    \
  if ((required) && !r.name)                          \
    missing = 1;
  HS_MALLOC_FAMILY(HS_LOOKUP)
#undef HS_LOOKUP
  hs_guard_leave(t, was);
  if (missing) {
    /* No allocator behind us: nothing sensible to do but keep serving the
     * arena until it runs out. */
    __atomic_store_n(&resolve_state, FAILED, __ATOMIC_RELEASE);
    return 0;
  }
  /* An optional function the allocator lacks keeps its boot_* fallback. */
#define HS_PUBLISH(ret, name, params, required) \
  if (r.name)                                   \
    __atomic_store_n(&hs_real.name, r.name, __ATOMIC_RELAXED);
  HS_MALLOC_FAMILY(HS_PUBLISH)
#undef HS_PUBLISH
  __atomic_store_n(&resolve_state, RESOLVED, __ATOMIC_RELEASE);
  return 1;
}

/* The boot_* functions: resolve, then either forward to the real function
 * or (while resolving, or if an optional symbol is missing) fall back on
 * the arena or on a function that does exist. */

static void *boot_malloc(size_t n) {
  if (hs_real_resolve())
    return HS_REAL(malloc)(n);
  return arena_alloc(n, 16);
}

static void boot_free(void *p) {
  if (hs_arena_owns(p))
    return;
  if (hs_real_resolve())
    HS_REAL(free)(p);
  /* Unresolved: a pointer we did not hand out, before any allocator was
   * found. Leaking it is the only safe choice. */
}

static void *boot_calloc(size_t n, size_t size) {
  if (hs_real_resolve())
    return HS_REAL(calloc)(n, size);
  size_t total;
  if (__builtin_mul_overflow(n, size, &total))
    return NULL;
  return arena_alloc(total, 16);
}

static void *boot_realloc(void *p, size_t n) {
  if (hs_real_resolve())
    return HS_REAL(realloc)(p, n);
  void *q = arena_alloc(n, 16);
  if (q && p && hs_arena_owns(p)) {
    size_t old = hs_arena_size(p);
    memcpy(q, p, old < n ? old : n);
  }
  return q;
}

static void *boot_reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  if (hs_real_resolve() && HS_REAL(reallocarray) != boot_reallocarray)
    return HS_REAL(reallocarray)(p, n, size);
  return boot_realloc(p, total);
}

static int boot_posix_memalign(void **out, size_t align, size_t n) {
  if (hs_real_resolve())
    return HS_REAL(posix_memalign)(out, align, n);
  void *q = arena_alloc(n, align);
  if (!q)
    return ENOMEM;
  *out = q;
  return 0;
}

static void *boot_memalign(size_t align, size_t n) {
  if (hs_real_resolve())
    return HS_REAL(memalign)(align, n);
  return arena_alloc(n, align);
}

static void *boot_aligned_alloc(size_t align, size_t n) {
  if (hs_real_resolve() && HS_REAL(aligned_alloc) != boot_aligned_alloc)
    return HS_REAL(aligned_alloc)(align, n);
  return boot_memalign(align, n);
}

static void *boot_valloc(size_t n) {
  if (hs_real_resolve() && HS_REAL(valloc) != boot_valloc)
    return HS_REAL(valloc)(n);
  return boot_memalign(4096, n);
}

static void *boot_pvalloc(size_t n) {
  if (hs_real_resolve() && HS_REAL(pvalloc) != boot_pvalloc)
    return HS_REAL(pvalloc)(n);
  size_t page = 4096;
  return boot_memalign(page, (n + page - 1) & ~(page - 1));
}

static size_t boot_malloc_usable_size(void *p) {
  if (hs_arena_owns(p))
    return hs_arena_size(p);
  if (hs_real_resolve() && HS_REAL(malloc_usable_size) != boot_malloc_usable_size)
    return HS_REAL(malloc_usable_size)(p);
  return 0;
}
