/*
 * state.h: the client's bottom layer, what every other client file may use
 * and which uses none of them: the enabled flag, the per-thread state with
 * the reentrancy guard and its helpers, the session's shared values (ring,
 * interval, seed, frame limit, sequences), disabling, the clock, the page
 * size and debug output.
 *
 * Layers (a file includes only headers of its own layer or below; no .c
 * includes another .c):
 *   leaves    common.h family.h wire.h sampler ring own addrset stacks
 *             modules pyframes (the CPython walker) probes (the USDT
 *             probes): no client state
 *   state     state.c (this)
 *   below the hooks: real (the real allocator), inject (GOT patching)
 *   unwinder  cfa_eh.c (reading .eh_frame), cfa.c (its caches and walk),
 *             unwind.c
 *   Python    pysend.c: a sample's Python frames and their code objects
 *   sampler   record.c (the hooks' slow paths), heaps.c (custom heaps),
 *             labels.c (allocation labels),
 *             maps.c (the mmap and brk heaps)
 *   hooks     hooks.c (the malloc family), pymem.c (Python's domains),
 *             maphooks.c (mmap, munmap, mremap, brk, sbrk)
 *   session   connect.c (the producer's socket and ring), session.c
 *             (start, fork, attach, exit; Python found at start or later)
 */
#ifndef HEAPSCOPE_CLIENT_STATE_H
#define HEAPSCOPE_CLIENT_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common.h"
#include "ring.h"
#include "sampler.h"

/* 1 while profiling; 0 when dormant (no HEAPSCOPE_SOCKET), disabled after a
 * failure or a detach, or in a forked child. Goes 0 -> 1 at the end of a
 * session's start and 1 -> 0 when it ends; a later attach may start another
 * session (session.c, heapscope_attach), after every thread left the old
 * one (hs_session_enter). */
extern int hs_enabled HS_HIDDEN;

/* Everything one thread owns. Initial-exec TLS: one %fs-relative access, no
 * __tls_get_addr call (which may allocate) and no lazy setup. */
struct hs_thread {
  struct hs_sampler sampler; /* countdown first: the hot field */
  /* Reentrancy guard. While set, the hooks record nothing and go on to the
   * real allocator (an allocation only moves the countdown, and a sample
   * point that lands on it is dropped: record.h, hs_alloc_unrecorded). It
   * is set around everything the client does itself, because libc, the
   * loader and libunwind allocate internally: without it a hook would
   * recurse into the client, or deadlock on a lock the client already
   * holds. It also covers signal handlers that allocate while this thread
   * is inside the client. Set and restored only by hs_guard_enter and
   * hs_guard_leave (below). */
  int guard;
  uint32_t unwinds; /* count of this thread's unwinds, for timing 1 in 64 */
  uint32_t timed_at; /* which unwind of 64 is timed: a random phase per thread (record.c) */
  int stack_known;  /* stack_lo/hi set (hs_thread_stack_bounds) */
  uintptr_t stack_lo, stack_hi; /* this thread's stack, [lo, hi) */
  /* &errno of this thread (it never moves), taken with its sampler
   * (record.c, thread_init): a sample keeps errno without calling
   * __errno_location. */
  int *errno_at;
  /* The session (hs_session.gen) this thread's sampler was set up for: a
   * thread that meets a newer one sets it up again (record.c). */
  uint32_t gen;
};

extern HS_TLS struct hs_thread hs_thread_state HS_HIDDEN;

/* Sets the guard of thread t (&hs_thread_state) and returns what it was,
 * for hs_guard_leave: scopes nest (a signal handler inside the client, a
 * pending call made from a hook's slow path), so a scope puts back what it
 * found rather than clearing. */
static inline int hs_guard_enter(struct hs_thread *t) {
  int was = t->guard;
  t->guard = 1;
  return was;
}

static inline void hs_guard_leave(struct hs_thread *t, int was) { t->guard = was; }

/* 1 while thread t is inside the client (its own allocations are not
 * recorded). */
static inline int hs_guard_held(const struct hs_thread *t) { return t->guard; }

/* A process-wide sequence counter, from 1, on its own cache line: every
 * record of its heap that the producer must order (malloc, free) bumps it. */
struct hs_seq_line {
  uint64_t next;
  char pad[56];
} __attribute__((aligned(64)));

/* The session's values every layer reads: set by the session (session.c,
 * connect.c) before hs_enabled goes to 1 with release order, so read them
 * after seeing hs_enabled set (acquire). */
struct hs_session {
  struct hs_ring ring;
  uint64_t interval;
  uint64_t seed;
  uint32_t max_frames;
  uint32_t threads; /* per-process thread index for sampler seeds */
  uint32_t gen;     /* 1 for the first session, + 1 for each new one */
  int debug;        /* HEAPSCOPE_DEBUG=1 */
  int tsc;          /* HS_CFG_TSC: records stamped with rdtsc (x86-64 only) */
};

extern struct hs_session hs_session HS_HIDDEN;
extern struct hs_seq_line hs_malloc_seq HS_HIDDEN; /* libc.malloc's (HS_REC_MALLOC/FREE) */
extern struct hs_seq_line hs_py_seq HS_HIDDEN;     /* Python's heap's (HS_PY_HEAP_ID) */

/* Threads inside a slow path that uses the session's tables and ring (the
 * address set, the stack table, the ring). A new session in the same
 * process (an attach after a detach) replaces them only once these are all 0
 * with hs_enabled 0: a counter is raised before hs_enabled is read, so
 * either the thread sees the client off or the new session sees the thread
 * (both sequentially consistent). Counted in HS_USER_SLOTS counters, each on
 * a cache line of its own, a thread's picked by the address of its state:
 * with one counter, threads sampling at once moved its line between their
 * cores at every sample and every sampled free (2 threads: ~2% of their
 * CPU, benchmarks/RESULTS.md). */
#define HS_USER_SLOTS 64
struct hs_user_slot {
  uint32_t n;
  char pad[60];
} __attribute__((aligned(64)));
extern struct hs_user_slot hs_session_users[HS_USER_SLOTS] HS_HIDDEN;

/* This thread's counter: a Fibonacci hash of its state's address (threads'
 * TLS blocks are megabytes apart, so the low bits alone would not spread). */
static inline uint32_t *hs_user_count(void) {
  uint64_t a = (uint64_t)(uintptr_t)&hs_thread_state;
  return &hs_session_users[(a * 0x9E3779B97F4A7C15ull) >> 58].n;
}

/* Enters the session's slow path: 1 when the client is on (then call
 * hs_session_leave after, on the same thread), 0 when off (nothing to leave). */
static inline int hs_session_enter(void) {
  uint32_t *n = hs_user_count();
  __atomic_add_fetch(n, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&hs_enabled, __ATOMIC_SEQ_CST))
    return 1;
  __atomic_sub_fetch(n, 1, __ATOMIC_RELEASE);
  return 0;
}

static inline void hs_session_leave(void) { __atomic_sub_fetch(hs_user_count(), 1, __ATOMIC_RELEASE); }

/* Page size, set by the constructor (for pvalloc). */
extern size_t hs_page_size HS_HIDDEN;

/* One line on stderr via write(2), only when HEAPSCOPE_DEBUG=1. Never stdio,
 * never allocates, keeps errno. */
HS_HIDDEN void hs_debug(const char *msg, uint64_t value);

/* Turns the client off (for the rest of the session) and says why in the
 * ring's header. */
HS_HIDDEN void hs_disable(int error);

/* Checks a status: a negative one disables the client. Returns 1 if the
 * caller may go on. */
static inline int hs_ok(int rc) {
  if (HS_UNLIKELY(rc < 0)) {
    hs_disable(-rc);
    return 0;
  }
  return 1;
}

/* A cheap monotonic clock (the kernel's tick, vDSO, ~4 ms steps): rate limits. */
static inline uint64_t hs_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC, read in the vDSO without a system call where the kernel's
 * clocksource allows (tsc): start_ts and exit_ts (wire.h), and the records' clock
 * without HS_CFG_TSC. Fine enough for lifetimes of a millisecond, which the coarse
 * clock's tick is not. */
static inline uint64_t hs_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The records' clock (MALLOC, FREE and their heap forms): with HS_CFG_TSC the
 * time-stamp counter (~9-16 ns against the vDSO's ~23-27 on the test VMs, read per sample
 * and per sent free), converted by the producer; else hs_mono_ns. */
static inline uint64_t hs_record_ns(void) {
#if defined(__x86_64__)
  if (HS_LIKELY(hs_session.tsc))
    return __builtin_ia32_rdtsc();
#endif
  return hs_mono_ns();
}

/* Notes the calling thread as the process's main thread (the constructor's,
 * when it is the main one): its stack's top is then known without asking. */
HS_HIDDEN void hs_thread_note_main(void);

/* Sets t's stack bounds, [stack_lo, stack_hi), once per thread. Under the
 * guard (pthread_getattr_np allocates). */
HS_HIDDEN void hs_thread_stack_bounds(struct hs_thread *t);

#endif
