/*
 * common.h: small things every client file shares: attributes, the status
 * convention, populating a table's pages. No state: the per-thread state,
 * the guard and debug output are the state layer's (state.h).
 */
#ifndef HEAPSCOPE_CLIENT_COMMON_H
#define HEAPSCOPE_CLIENT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

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

/* Writes in the pages of [p, p + len) in one call, the first time only
 * (*done goes 0 -> 1): a table that is read before it is written costs two
 * faults a page (the zero page, then its copy), and one that is populated at
 * start costs a program that never samples. Contents are kept;
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
