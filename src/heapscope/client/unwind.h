/*
 * unwind.h: the call stack of a sampled allocation, taken in the target.
 *
 * Our own walk over cached CFA rules (cfa.h) first, under auto and
 * libunwind; where it gives up, libunwind's unw_backtrace() (fast trace
 * cache on x86_64), loaded with dlopen("libunwind.so.8") so that nothing is
 * needed at build time; else a frame-pointer walk; or only the immediate
 * caller (HS_UNWINDER_NONE). HEAPSCOPE_UNWIND_CFA=0 turns our walk off (for
 * an A/B); HEAPSCOPE_UNWIND_VERIFY=1 (tests) runs both on every sample,
 * keeps libunwind's answer and prints a count of differences at exit. The
 * leading frames that belong to this library are stripped, so the leaf is
 * the caller of malloc (operator new, or the user's function). Return
 * addresses are stored as they come: the producer subtracts 1 to land in
 * the call instruction when it symbolizes.
 */
#ifndef HEAPSCOPE_CLIENT_UNWIND_H
#define HEAPSCOPE_CLIENT_UNWIND_H

#include <stdint.h>

#include "cfa.h"
#include "common.h"

/* Picks and warms the unwinder (call under the guard: the first call of any
 * unwinder allocates). Returns the one in use: AUTO resolves to LIBUNWIND or
 * FP; LIBUNWIND falls back to FP when the library does not load. */
HS_HIDDEN uint32_t hs_unwind_init(uint32_t requested);

/* Fills pcs (room for max_frames <= HS_MAX_FRAMES), leaf first. Returns the
 * depth; sets *truncated when the stack had more frames. Call under the
 * guard and without holding any client lock: libunwind takes the loader
 * lock (dl_iterate_phdr). */
HS_HIDDEN uint32_t hs_unwind(uint64_t *pcs, uint32_t max_frames, int *truncated);

/* Room for this library's own leading frames, which are unwound too. */
#define HS_UNWIND_SLACK 16

/* As hs_unwind, without the copy: buf has room for max_frames +
 * HS_UNWIND_SLACK, and the stack (the returned depth) starts at
 * buf[*first], past our own frames. */
HS_HIDDEN uint32_t hs_unwind_in_place(uint64_t *buf, uint32_t max_frames, int *truncated,
                                      uint32_t *first);

/* The pieces of hs_unwind_here below. hs_unw_backtrace is libunwind's
 * unw_backtrace while libunwind is the unwinder in use, else NULL;
 * hs_unwind_raw runs the other unwinders; hs_unwind_trim strips our own
 * leading frames from n unwound ones and sets *truncated and *first. */
typedef int (*hs_unw_backtrace_fn)(void **buffer, int size);
extern hs_unw_backtrace_fn hs_unw_backtrace HS_HIDDEN;
/* 0: our CFA walk off; 1: on, before the others; 2: verify (see above). */
extern int hs_unwind_cfa HS_HIDDEN;
HS_HIDDEN uint32_t hs_unwind_verify(uint64_t *buf, uint32_t want);
HS_HIDDEN uint32_t hs_unwind_raw(uint64_t *buf, uint32_t want);
HS_HIDDEN uint32_t hs_unwind_trim(const uint64_t *buf, uint32_t n, uint32_t max_frames,
                                  int *truncated, uint32_t *first);

/* hs_unwind_in_place, inlined into its caller: with libunwind, every frame
 * of ours between the program and unw_backtrace is one more step of its walk
 * (a lookup in its per-thread cache and a few loads, ~75 instructions), and
 * one more frame for the trim to drop; calling unw_backtrace from the
 * caller's own frame saves the one of hs_unwind_in_place. */
static inline __attribute__((always_inline)) uint32_t
hs_unwind_here(uint64_t *buf, uint32_t max_frames, int *truncated, uint32_t *first) {
  uint32_t want = max_frames + HS_UNWIND_SLACK;
  uint32_t n;
  hs_unw_backtrace_fn bt = hs_unw_backtrace;
  int k = -1;
  int cfa = hs_unwind_cfa;
  if (HS_LIKELY(cfa == 1))
    k = hs_cfa_backtrace(buf, want);
  else if (cfa == 2)
    k = (int)hs_unwind_verify(buf, want);
  if (k >= 0) {
    n = (uint32_t)k;
  } else if (bt) {
    /* uint64_t and void * have the same size and representation here. */
    k = bt((void **)buf, (int)want);
    n = k > 0 ? (uint32_t)k : 0;
  } else {
    n = hs_unwind_raw(buf, want);
  }
  return hs_unwind_trim(buf, n, max_frames, truncated, first);
}

#endif
