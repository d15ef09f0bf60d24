/*
 * own.h: heapscope's own memory in the target, measured at its end.
 *
 * `record` compares the sampled heap with the process's peak RSS, and part
 * of that RSS is ours: the ring (shared with the producer), the stack and
 * address tables, the unwinder's caches, the library's static tables. Each
 * file that maps a table registers it here (rare events: at start, when a
 * table grows, in a fork child's restart); at the process's end (its last
 * destructor or _exit: session.c, note_exit) the client adds up what of it is resident and leaves that in the ring's meta
 * (own_rss, wire.h) for the producer to book.
 *
 * The two registration calls are weak: the C unit tests build one client
 * file alone (tests/unit/client), without this one, and then register
 * nothing.
 */
#ifndef HEAPSCOPE_CLIENT_OWN_H
#define HEAPSCOPE_CLIENT_OWN_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

enum hs_own_kind {
  HS_OWN_PRIVATE = 0, /* anonymous private memory: a page counts once written */
  HS_OWN_SHARED = 1,  /* the ring's memfd: a page counts once mapped here */
};

HS_HIDDEN void hs_own_add(const void *p, size_t len, int kind) __attribute__((weak));
HS_HIDDEN void hs_own_forget(const void *p) __attribute__((weak));

/* [p, p + len) was just mapped by the client for itself. */
static inline void hs_own_map(const void *p, size_t len, int kind) {
  if (hs_own_add)
    hs_own_add(p, len, kind);
}

/* The mapping that starts at p is about to be unmapped. */
static inline void hs_own_unmap(const void *p) {
  if (hs_own_forget)
    hs_own_forget(p);
}

/* Bytes of the registered mappings and of this library's writable segment
 * that are resident now; 0 when that cannot be told (no /proc). No
 * allocation: a few system calls and a stack buffer. */
HS_HIDDEN uint64_t hs_own_resident(void);

/* This process's VmHWM in bytes (/proc/self/status); 0 when unreadable. */
HS_HIDDEN uint64_t hs_own_peak_rss(void);

#endif
