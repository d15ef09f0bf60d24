/*
 * record.h: the sampler layer's API to the hooks (hooks.c, pymem.c): the
 * fast paths inline, the slow paths in record.c.
 *
 * hooks.c calls these once per interposed call. The fast paths are inline:
 * an unsampled malloc costs a load of hs_enabled, the TLS countdown
 * decrement and their branches (decided before the real malloc runs, so
 * that the hook can jump to it); an unsampled free costs one load of the
 * address filter and one predictable branch (addrset.h).
 */
#ifndef HEAPSCOPE_CLIENT_RECORD_H
#define HEAPSCOPE_CLIENT_RECORD_H

#include <stddef.h>

#include "addrset.h"
#include "common.h"
#include "state.h"
#include "wire.h"

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
 * can run before the real allocator. The guard (state.h) is not looked at
 * here but in the slow path, which drops a sample taken under it (it saves
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

/* The stack of a sample taken outside the malloc hooks (maps.c), as a
 * malloc sample's (Python frames and all), sent when new; its id in
 * *id_out. 0 when the sample goes no further. Under the guard, inside the
 * session (hs_session_enter), holding no client lock. */
HS_HIDDEN int hs_record_stack(uint64_t *id_out);

/* The HEAP record of Python's heap, once per session, before the first
 * record of that heap (outside any hook, under the guard). */
HS_HIDDEN HS_MUST_CHECK int hs_record_announce_py_heap(void);

/* A fork child's new session: the sampled addresses, Python's heap's
 * announcement and the memos of the parent's session are dropped. */
HS_HIDDEN void hs_record_reset(void);

/* In a fork child (the atfork handler): its thread's kernel id is its own. */
HS_HIDDEN void hs_record_forked(void);

/* Thread t's sampler, seeded from the session's seed and the thread's
 * index, and its &errno: at its first sampled allocation, or by a fork
 * child's new session. */
HS_HIDDEN void hs_record_thread_init(struct hs_thread *t);

#endif
