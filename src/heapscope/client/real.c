/* real.c: resolution of the real allocator, and the bootstrap arena. */
#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
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

#define HS_BOOT_MAP_DECL(ret, name, params, required) static ret boot_map_##name params;
HS_MAP_FAMILY(HS_BOOT_MAP_DECL)
#undef HS_BOOT_MAP_DECL

struct hs_real_map_fns hs_real_map = {
#define HS_BOOT_MAP_INIT(ret, name, params, required) boot_map_##name,
    HS_MAP_FAMILY(HS_BOOT_MAP_INIT)
#undef HS_BOOT_MAP_INIT
};

/* The mapping family's real functions, from the same dlsym scope: each one
 * found replaces its boot_map_* (an absent one keeps it). Under the guard. */
static void resolve_maps(void) {
#define HS_MAP_PUBLISH(ret, name, params, required)                         \
  {                                                                         \
    ret(*fn) params = (ret(*) params)dlsym(RTLD_NEXT, #name);               \
    if (fn)                                                                 \
      __atomic_store_n(&hs_real_map.name, fn, __ATOMIC_RELAXED);            \
  }
  HS_MAP_FAMILY(HS_MAP_PUBLISH)
#undef HS_MAP_PUBLISH
}

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
  resolve_maps();
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

/* ---- the mapping family before resolution (real.h) ---- */

long hs_raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory");
  return x0;
#else
#error "hs_raw_syscall: no system call sequence for this architecture"
#endif
}

/* The kernel's -errno into errno and the C library's failure value. */
static long raw_result(long r, long failed) {
  if ((unsigned long)r > (unsigned long)-4096L) {
    errno = (int)-r;
    return failed;
  }
  return r;
}

#define RAW(n, a, b, c, d, e, f) \
  hs_raw_syscall((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

/* Each boot_map_* calls the real function once it is found, else the
 * system call (resolution under way, or the C library lacks it). */
#define MAP_RESOLVED(name) (hs_real_resolve() && HS_REAL_MAP(name) != boot_map_##name)

static void *boot_map_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (MAP_RESOLVED(mmap))
    return HS_REAL_MAP(mmap)(addr, len, prot, flags, fd, off);
  return (void *)raw_result(RAW(SYS_mmap, addr, len, prot, flags, fd, off), -1);
}

static void *boot_map_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (MAP_RESOLVED(mmap64))
    return HS_REAL_MAP(mmap64)(addr, len, prot, flags, fd, off);
  return boot_map_mmap(addr, len, prot, flags, fd, off);
}

static void *boot_map_mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *to = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    to = va_arg(ap, void *);
    va_end(ap);
  }
  if (MAP_RESOLVED(mremap))
    return HS_REAL_MAP(mremap)(old, old_len, new_len, flags, to);
  return (void *)raw_result(RAW(SYS_mremap, old, old_len, new_len, flags, to, 0), -1);
}

static int boot_map_mprotect(void *addr, size_t len, int prot) {
  if (MAP_RESOLVED(mprotect))
    return HS_REAL_MAP(mprotect)(addr, len, prot);
  return (int)raw_result(RAW(SYS_mprotect, addr, len, prot, 0, 0, 0), -1);
}

static int boot_map_madvise(void *addr, size_t len, int advice) {
  if (MAP_RESOLVED(madvise))
    return HS_REAL_MAP(madvise)(addr, len, advice);
  return (int)raw_result(RAW(SYS_madvise, addr, len, advice, 0, 0, 0), -1);
}

static int boot_map_munmap(void *addr, size_t len) {
  if (MAP_RESOLVED(munmap))
    return HS_REAL_MAP(munmap)(addr, len);
  return (int)raw_result(RAW(SYS_munmap, addr, len, 0, 0, 0, 0), -1);
}

/* The kernel's brk answers with the break, moved or not. */
static int boot_map_brk(void *addr) {
  if (MAP_RESOLVED(brk))
    return HS_REAL_MAP(brk)(addr);
  if (RAW(SYS_brk, addr, 0, 0, 0, 0, 0) != (long)addr) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

static void *boot_map_sbrk(intptr_t delta) {
  if (MAP_RESOLVED(sbrk))
    return HS_REAL_MAP(sbrk)(delta);
  long cur = RAW(SYS_brk, 0, 0, 0, 0, 0, 0);
  if (delta == 0)
    return (void *)cur;
  if (RAW(SYS_brk, cur + delta, 0, 0, 0, 0, 0) != cur + delta) {
    errno = ENOMEM;
    return (void *)-1;
  }
  return (void *)cur;
}

/* Six arguments whatever n takes: what the C library's syscall does too. */
static long boot_map_syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
  long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
  va_end(ap);
  if (MAP_RESOLVED(syscall))
    return HS_REAL_MAP(syscall)(n, a, b, c, d, e, f);
  return raw_result(hs_raw_syscall(n, a, b, c, d, e, f), -1);
}
