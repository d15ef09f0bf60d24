/*
 * client.h: the tiny API between the hooks and the rest of the client.
 *
 * hooks.c calls exactly one of these per interposed call. The fast paths are
 * inline: an unsampled malloc costs a load of hs_enabled, the TLS countdown
 * decrement and a branch; an unsampled free costs a lock-free lookup in the
 * set of live sampled addresses.
 */
#ifndef HEAPSCOPE_CLIENT_CLIENT_H
#define HEAPSCOPE_CLIENT_CLIENT_H

#include <stddef.h>

#include "addrset.h"
#include "common.h"

/* 1 while profiling; 0 when dormant (no HEAPSCOPE_SOCKET), disabled after a
 * failure, or in a forked child. Only ever goes 0 -> 1 once, at the end of
 * the constructor, then possibly 1 -> 0 for good. */
extern int hs_enabled HS_HIDDEN;

HS_HIDDEN void hs_record_alloc_slow(void *addr, size_t size);
HS_HIDDEN void hs_record_free_slow(void *addr);

/* A successful allocation of `size` bytes at addr (addr may be NULL: then
 * it only moves the countdown). Call it after the real allocator returned. */
static inline void hs_record_alloc(void *addr, size_t size) {
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_RELAXED))
    return;
  struct hs_thread *t = &hs_thread_state;
  if (t->guard) /* the client's own allocation (see common.h) */
    return;
  if (hs_sampler_skip(&t->sampler, size))
    return;
  hs_record_alloc_slow(addr, size);
}

/* addr is about to be freed. Call it before the real free. */
static inline void hs_record_free(void *addr) {
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_RELAXED) || addr == NULL)
    return;
  if (hs_thread_state.guard) /* the client's own free (see common.h) */
    return;
  if (!hs_addrset_contains(addr))
    return;
  hs_record_free_slow(addr);
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
