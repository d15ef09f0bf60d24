/*
 * maphooks.c: the interposed mapping calls (family.h, HS_MAP_FAMILY), and
 * nothing else: each calls the real function (real.h) and, while the
 * client watches this thread (maps.h, hs_maps_watching: on, not inside the
 * client), books what it mapped or unmapped (maps.c).
 *
 *   mmap, mmap64: the real call, then the mapping booked.
 *   mprotect:     the real call, then a reservation's pages made
 *                 accessible booked (V8 reserves PROT_NONE and commits so).
 *   madvise:      the real call, then the booked pages it gives back
 *                 (MADV_DONTNEED, MADV_FREE, MADV_REMOVE) end.
 *   munmap:       the range's bookings ended BEFORE the real munmap (as
 *                 free: the range cannot be mapped again and booked first).
 *   mremap:       maps.c makes the real call between the two halves.
 *   sbrk, brk:    likewise, with the range added or dropped.
 *   syscall:      the mapping calls made through it are counted, not booked
 *                 (wire.h, direct_map_calls): said as memory not seen.
 *
 * The build defines _FILE_OFFSET_BITS=64, under which <sys/mman.h> names
 * mmap64 for mmap; this file defines both symbols, so it takes the plain
 * declarations (off_t is 64 bits either way on the 64-bit targets we build
 * for).
 */
#undef _FILE_OFFSET_BITS

#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "maps.h"
#include "real.h"

HS_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  void *p = HS_REAL_MAP(mmap)(addr, len, prot, flags, fd, off);
  if (HS_UNLIKELY(hs_maps_watching()) && p != MAP_FAILED)
    hs_maps_mapped(p, len, prot, flags, __builtin_return_address(0));
  return p;
}

HS_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  void *p = HS_REAL_MAP(mmap64)(addr, len, prot, flags, fd, off);
  if (HS_UNLIKELY(hs_maps_watching()) && p != MAP_FAILED)
    hs_maps_mapped(p, len, prot, flags, __builtin_return_address(0));
  return p;
}

HS_EXPORT int mprotect(void *addr, size_t len, int prot) {
  int rc = HS_REAL_MAP(mprotect)(addr, len, prot);
  if (HS_UNLIKELY(hs_maps_watching()) && rc == 0)
    hs_maps_protected(addr, len, prot, __builtin_return_address(0));
  return rc;
}

/* The advice that gives a range's pages back to the kernel while it stays
 * mapped; any other (a hint, MADV_DONTFORK, ...) leaves the booking alone. */
static int gives_back(int advice) {
  return advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE;
}

HS_EXPORT int madvise(void *addr, size_t len, int advice) {
  int rc = HS_REAL_MAP(madvise)(addr, len, advice);
  if (HS_UNLIKELY(hs_maps_watching()) && rc == 0 && gives_back(advice))
    hs_maps_given_back(addr, len, __builtin_return_address(0));
  return rc;
}

HS_EXPORT int munmap(void *addr, size_t len) {
  if (HS_UNLIKELY(hs_maps_watching()))
    hs_maps_unmapping(addr, len, __builtin_return_address(0));
  return HS_REAL_MAP(munmap)(addr, len);
}

HS_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *to = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    to = va_arg(ap, void *);
    va_end(ap);
  }
  if (HS_UNLIKELY(hs_maps_watching()))
    return hs_maps_remap(old, old_len, new_len, flags, to, __builtin_return_address(0));
  return HS_REAL_MAP(mremap)(old, old_len, new_len, flags, to);
}

HS_EXPORT void *sbrk(intptr_t delta) {
  if (HS_UNLIKELY(hs_maps_watching()))
    return hs_maps_sbrk(delta, __builtin_return_address(0));
  return HS_REAL_MAP(sbrk)(delta);
}

HS_EXPORT int brk(void *end) {
  if (HS_UNLIKELY(hs_maps_watching()))
    return hs_maps_brk(end, __builtin_return_address(0));
  return HS_REAL_MAP(brk)(end);
}

/* Six arguments whatever n takes, as the C library's own syscall reads
 * them: the registers (or stack slots) of the ones not passed hold
 * whatever was there, and the kernel ignores them. */
HS_EXPORT long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
  long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
  va_end(ap);
  if (HS_UNLIKELY(n == SYS_mmap || n == SYS_munmap || n == SYS_mremap || n == SYS_brk) &&
      hs_maps_watching())
    hs_maps_direct(n, a, b, c, __builtin_return_address(0));
  return HS_REAL_MAP(syscall)(n, a, b, c, d, e, f);
}

/* Hidden aliases, as hooks.c's: inject.c points an attached process's GOT
 * entries of the mapping calls at these (the mapping heaps then see what is
 * mapped from the attach on; docs/mmap-heaps.md). */
#define HS_MAP_HOOK_ALIAS(ret, name, params, required) \
  extern ret hs_hook_##name params __attribute__((alias(#name), copy(name), visibility("hidden")));
HS_MAP_FAMILY(HS_MAP_HOOK_ALIAS)
#undef HS_MAP_HOOK_ALIAS
