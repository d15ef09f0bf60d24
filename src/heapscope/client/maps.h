/*
 * maps.h: the memory malloc never sees, booked in two heaps of its own
 * (wire.h: HS_MMAP_HEAP_ID "mmap", HS_BRK_HEAP_ID "brk"): the slow paths
 * that the mapping hooks (maphooks.c) call. The semantics are in
 * docs/mmap-heaps.md and at the top of maps.c.
 *
 * Each hook asks hs_maps_watching() first: off, or inside the client (the
 * guard, which pymalloc's wrappers set too), the call only goes to the real
 * function. `caller` is the hook's return address: a call from the text of
 * an allocator heapscope counts already is that allocator's own.
 */
#ifndef HEAPSCOPE_CLIENT_MAPS_H
#define HEAPSCOPE_CLIENT_MAPS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "state.h"

static inline int hs_maps_watching(void) {
  return __atomic_load_n(&hs_enabled, __ATOMIC_RELAXED) && !hs_guard_held(&hs_thread_state);
}

/* A successful mmap of len bytes at p (prot, flags as given). */
HS_HIDDEN void hs_maps_mapped(void *p, size_t len, int prot, int flags, const void *caller);
/* A successful mprotect: reserved (PROT_NONE) ranges made accessible are
 * booked, booked ones made PROT_NONE end. */
HS_HIDDEN void hs_maps_protected(void *addr, size_t len, int prot, const void *caller);
/* A successful madvise gave [addr, addr + len)'s pages back (MADV_DONTNEED,
 * MADV_FREE, MADV_REMOVE): the booked ones there end, as mprotect PROT_NONE
 * ends them, and are booked again when mprotect or mmap makes them memory. */
HS_HIDDEN void hs_maps_given_back(void *addr, size_t len, const void *caller);
/* [addr, addr + len) is about to be unmapped. */
HS_HIDDEN void hs_maps_unmapping(void *addr, size_t len, const void *caller);
/* The real mremap, with what it keeps, moves, adds and drops booked. */
HS_HIDDEN void *hs_maps_remap(void *old, size_t old_len, size_t new_len, int flags, void *to,
                              const void *caller);
/* The real sbrk and brk, with the range they add or drop booked. */
HS_HIDDEN void *hs_maps_sbrk(intptr_t delta, const void *caller);
HS_HIDDEN int hs_maps_brk(void *end, const void *caller);
/* syscall(n, a, b, c, ...) with n a mapping call: counted as unseen. */
HS_HIDDEN void hs_maps_direct(long n, long a, long b, long c, const void *caller);

/* A session starts (its config's flags, wire.h HS_CFG_*): the booked ranges
 * of an earlier one (a fork parent's, an attach's before) are dropped, the
 * heaps are announced again at their first sample, and the allocator's text
 * is found. Before hs_enabled goes to 1, under the guard. */
HS_HIDDEN void hs_maps_session(uint32_t flags);

#endif
