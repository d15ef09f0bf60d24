/*
 * common.h: small things every client file shares: attributes, the status
 * convention, the per-thread state with the reentrancy guard, debug output.
 */
#ifndef HEAPSCOPE_CLIENT_COMMON_H
#define HEAPSCOPE_CLIENT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "sampler.h"

#define HS_HIDDEN __attribute__((visibility("hidden")))
#define HS_EXPORT __attribute__((visibility("default")))
#define HS_MUST_CHECK __attribute__((warn_unused_result))
#define HS_TLS __thread __attribute__((tls_model("initial-exec")))
#define HS_LIKELY(x) __builtin_expect(!!(x), 1)
#define HS_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Status of every client function that can fail: HS_OK, HS_DROPPED (the
 * record was lost but the client keeps going), or a negative value that
 * disables the client: -(enum hs_client_error). */
enum { HS_OK = 0, HS_DROPPED = 1 };

/* Everything one thread owns. Initial-exec TLS: one %fs-relative access, no
 * __tls_get_addr call (which may allocate) and no lazy setup. */
struct hs_thread {
  struct hs_sampler sampler; /* countdown first: the hot field */
  /* Reentrancy guard. While set, the hooks record nothing and go on to the
   * real allocator (an allocation only moves the countdown, and a sample
   * point that lands on it is dropped: client.h, hs_alloc_unrecorded). It
   * is set around everything the client does itself, because libc, the
   * loader and libunwind allocate internally: without it a hook would
   * recurse into the client, or deadlock on a lock the client already
   * holds. It also covers signal handlers that allocate while this thread
   * is inside the client. */
  int guard;
  uint32_t unwinds; /* count of this thread's unwinds, for timing 1 in 64 */
  int stack_known;  /* stack_lo/hi set (unwind.c, frame-pointer walk) */
  uintptr_t stack_lo, stack_hi; /* this thread's stack, [lo, hi) */
  /* &errno of this thread (it never moves), taken with its sampler
   * (client.c, thread_init): a sample keeps errno without calling
   * __errno_location. */
  int *errno_at;
};

extern HS_TLS struct hs_thread hs_thread_state HS_HIDDEN;

/* One line on stderr via write(2), only when HEAPSCOPE_DEBUG=1. Never stdio,
 * never allocates. */
HS_HIDDEN void hs_debug(const char *msg, uint64_t value);

/* Writes in the pages of [p, p + len) in one call, the first time only
 * (*done goes 0 -> 1): a table that is read before it is written costs two
 * faults a page (the zero page, then its copy), and one that is populated at
 * start costs a program that never samples (issue 13). Contents are kept;
 * a kernel without MADV_POPULATE_WRITE (before Linux 5.14) leaves it to the
 * faults. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static inline void hs_populate_once(int *done, void *p, size_t len) {
  if (HS_UNLIKELY(!__atomic_load_n(done, __ATOMIC_RELAXED))) {
    __atomic_store_n(done, 1, __ATOMIC_RELAXED);
    (void)madvise(p, len, MADV_POPULATE_WRITE);
  }
}

#endif
