/*
 * client.h: the tiny API between the hooks and the rest of the client.
 *
 * hooks.c calls these once per interposed call. The fast paths are inline:
 * an unsampled malloc costs a load of hs_enabled, the TLS countdown
 * decrement and their branches (decided before the real malloc runs, so
 * that the hook can jump to it); an unsampled free costs one load of the
 * address filter and one predictable branch (addrset.h).
 */
#ifndef HEAPSCOPE_CLIENT_CLIENT_H
#define HEAPSCOPE_CLIENT_CLIENT_H

#include <stddef.h>

#include "addrset.h"
#include "common.h"
#include "wire.h"

/* 1 while profiling; 0 when dormant (no HEAPSCOPE_SOCKET), disabled after a
 * failure, or in a forked child. Only ever goes 0 -> 1 once, at the end of
 * the constructor, then possibly 1 -> 0 for good. */
extern int hs_enabled HS_HIDDEN;

/* Returns addr, so that a hook can end in a tail call to it: then no frame
 * of the hook lies between the program and the unwinder. */
HS_HIDDEN void *hs_record_alloc_slow(void *addr, size_t size);
HS_HIDDEN void hs_record_free_slow(void *addr);
/* The free of an address in the filter: recorded, then the real free
 * (unless it is the bootstrap arena's, real.h). */
HS_HIDDEN void hs_free_checked(void *addr);

/* 1 when an allocation of `size` bytes is certainly not recorded: the
 * client is off, or the countdown does not reach it (its bytes are then
 * consumed). 0: the real allocation must be followed by
 * hs_record_alloc_slow(addr, size), which decides. Needs no address, so it
 * can run before the real allocator. The guard (common.h) is not looked at
 * here but in the slow path, which drops a sample taken under it (issue 13:
 * three instructions of every malloc, calloc and realloc; cc1plus makes 14
 * of them per sample): the client's own bytes then move the countdown too,
 * and the sample points that land on them are dropped, which leaves every
 * estimate unbiased, the countdown being memoryless per byte. */
static inline int hs_alloc_unrecorded(size_t size) {
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_RELAXED))
    return 1;
  return hs_sampler_skip(&hs_thread_state.sampler, size);
}

/* A successful allocation of `size` bytes at addr (addr may be NULL: then
 * it only moves the countdown). Call it after the real allocator returned. */
static inline void hs_record_alloc(void *addr, size_t size) {
  if (!hs_alloc_unrecorded(size))
    (void)hs_record_alloc_slow(addr, size);
}

/* addr is about to be freed. Call it before the real free. The filter in
 * front of the address set answers for almost every unsampled address;
 * the slow path checks the rest (off, NULL, the guard, the set itself). */
static inline void hs_record_free(void *addr) {
  if (HS_LIKELY(!hs_addr_maybe_sampled(addr)))
    return;
  hs_record_free_slow(addr);
}

/* Python's MEM and OBJ allocator domains (pymem.c) book in their own heap,
 * HS_PY_HEAP_ID (wire.h), with the same per-thread countdown as malloc (the
 * countdown is memoryless per byte, so sharing it leaves each heap's
 * estimate unbiased). Their sampled addresses are kept in the address set
 * under addr ^ HS_PY_HEAP_KEY, as a custom heap's (heaps.c): pymalloc's
 * passing a request on to malloc, then malloc handing the block out again,
 * never mixes the two heaps' entries. */
#define HS_PY_HEAP_KEY ((uint64_t)HS_PY_HEAP_ID << 56)
HS_HIDDEN void hs_record_py_alloc_slow(void *addr, size_t size);
HS_HIDDEN void hs_record_py_free_slow(void *addr);

static inline void hs_record_py_alloc(void *addr, size_t size) {
  if (!hs_alloc_unrecorded(size))
    hs_record_py_alloc_slow(addr, size);
}

static inline void hs_record_py_free(void *addr) {
  /* addr ^ HS_PY_HEAP_KEY has addr's filter bucket (addrset.h). */
  if (HS_LIKELY(!hs_addr_maybe_sampled(addr)))
    return;
  hs_record_py_free_slow(addr);
}

/* What heapscope_attach() returns (the producer reads it through gdb). */
enum hs_attach_result {
  HS_ATTACH_OK = 0,
  HS_ATTACH_BUSY = 1,       /* this process has (or had) a session already */
  HS_ATTACH_NO_SESSION = 2, /* connect or handshake failed: stays dormant */
  HS_ATTACH_NO_HOOKS = 3,   /* profiling, but no GOT entry could be patched */
};

HS_EXPORT int heapscope_attach(const char *socket_path, const char *token);

/* Page size, cached by the constructor (for pvalloc). */
extern size_t hs_page_size HS_HIDDEN;

#endif
