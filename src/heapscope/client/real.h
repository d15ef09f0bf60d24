/*
 * real.h: the allocator we interpose on (the next definition of each symbol,
 * found with dlsym(RTLD_NEXT); glibc 2.36 does not export __libc_malloc).
 *
 * Bootstrap: every pointer starts at a boot_* function that resolves all of
 * them on first use, so no branch is needed on the hot path and the first
 * hook call may come before our constructor (another library's constructor,
 * or libc's own init). While resolving, dlsym itself may call malloc or
 * calloc: those calls are served from a static bump arena. free() of an arena
 * pointer is ignored, realloc() of one copies it out (hs_arena_owns()).
 */
#ifndef HEAPSCOPE_CLIENT_REAL_H
#define HEAPSCOPE_CLIENT_REAL_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "family.h"

/* One pointer per member of the family (family.h). */
struct hs_real_fns {
#define HS_REAL_FIELD(ret, name, params, required) ret(*name) params;
  HS_MALLOC_FAMILY(HS_REAL_FIELD)
#undef HS_REAL_FIELD
};

extern struct hs_real_fns hs_real HS_HIDDEN;

/* Loads one pointer of hs_real (relaxed: another thread may be publishing). */
#define HS_REAL(fn) __atomic_load_n(&hs_real.fn, __ATOMIC_RELAXED)

/* The mapping calls (family.h, HS_MAP_FAMILY), resolved with the malloc
 * family. Until then, or when the C library lacks one, each is served by
 * its system call (hs_raw_syscall): an mmap can come before any malloc (a
 * constructor's), or from inside the resolution (an allocator that maps
 * its memory through the PLT, called by dlsym). */
struct hs_real_map_fns {
#define HS_REAL_MAP_FIELD(ret, name, params, required) ret(*name) params;
  HS_MAP_FAMILY(HS_REAL_MAP_FIELD)
#undef HS_REAL_MAP_FIELD
};

extern struct hs_real_map_fns hs_real_map HS_HIDDEN;

#define HS_REAL_MAP(fn) __atomic_load_n(&hs_real_map.fn, __ATOMIC_RELAXED)

/* The system call n itself, with the kernel's result (-errno on failure):
 * no C library function, no hook. */
HS_HIDDEN long hs_raw_syscall(long n, long a, long b, long c, long d, long e, long f);

/* Resolves the real functions now (idempotent). Returns 1 once resolved. */
HS_HIDDEN int hs_real_resolve(void);

#define HS_ARENA_SIZE (64 * 1024)
extern unsigned char hs_arena[HS_ARENA_SIZE] HS_HIDDEN;

static inline int hs_arena_owns(const void *p) {
  return (uintptr_t)p - (uintptr_t)hs_arena < (uintptr_t)HS_ARENA_SIZE;
}

/* Bytes usable at an arena pointer (for realloc's copy). */
HS_HIDDEN size_t hs_arena_size(const void *p);

#endif
