/*
 * family.h: the malloc family, written once (none missed). Every list of it in
 * the client is expanded from HS_MALLOC_FAMILY: the table of real functions
 * (real.h), their resolution and bootstrap fallbacks (real.c), the hidden
 * aliases of the hooks (hooks.c) and the GOT patch table (inject.c).
 * preload.map and tests/unit/client/test_client.py are checked against this
 * list by the tests (tests/unit/client/test_client.py reads this file).
 *
 * X(ret, name, params, required): required = 1 when the client cannot work
 * without the real function (resolution fails without it); optional ones
 * keep their bootstrap fallback when the allocator lacks them.
 */
#ifndef HEAPSCOPE_CLIENT_FAMILY_H
#define HEAPSCOPE_CLIENT_FAMILY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HS_MALLOC_FAMILY(X)                                      \
  X(void *, malloc, (size_t), 1)                                 \
  X(void, free, (void *), 1)                                     \
  X(void *, calloc, (size_t, size_t), 1)                         \
  X(void *, realloc, (void *, size_t), 1)                        \
  X(void *, reallocarray, (void *, size_t, size_t), 0)           \
  X(int, posix_memalign, (void **, size_t, size_t), 1)           \
  X(void *, aligned_alloc, (size_t, size_t), 0)                  \
  X(void *, memalign, (size_t, size_t), 1)                       \
  X(void *, valloc, (size_t), 0)                                 \
  X(void *, pvalloc, (size_t), 0)                                \
  X(size_t, malloc_usable_size, (void *), 0)

/* The memory malloc never sees (maps.h): the calls that map and unmap it,
 * hooked by maphooks.c, their real functions in real.h. None is required:
 * one the C library lacks is served by the system call itself. syscall is
 * here only to see the others made through it (counted, not booked).
 * preload.map and tests/unit/client read this list too. */
#define HS_MAP_FAMILY(X)                                         \
  X(void *, mmap, (void *, size_t, int, int, int, off_t), 0)     \
  X(void *, mmap64, (void *, size_t, int, int, int, off_t), 0)   \
  X(void *, mremap, (void *, size_t, size_t, int, ...), 0)       \
  X(int, mprotect, (void *, size_t, int), 0)                     \
  X(int, madvise, (void *, size_t, int), 0)                      \
  X(int, munmap, (void *, size_t), 0)                            \
  X(int, brk, (void *), 0)                                       \
  X(void *, sbrk, (intptr_t), 0)                                 \
  X(long, syscall, (long, ...), 0)

#endif
