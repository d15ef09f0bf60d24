/*
 * cfa.h: our own x86_64 unwinder, with a per-pc cache of CFA rules; tried
 * before libunwind, which remains the fallback for anything it cannot do.
 *
 * For a return address pc, a cache entry says how to reach the caller's
 * frame: CFA = rsp + N or rbp + N; the return address at CFA - 8; rbp
 * restored from CFA - 8k or unchanged; or "the stack ends here" (the return
 * address register undefined, as in _start and clone3). A miss finds the
 * FDE of pc - 1 in its module's .eh_frame_hdr table (the module found with
 * dl_iterate_phdr, on the miss path only; each module's segment and table
 * kept from its first look) and runs the CIE and FDE programs up to pc - 1,
 * or takes the rule from the rows of an earlier run of that FDE (the memo
 * of decoded FDEs). Everything else (a CFA expression or another CFA register,
 * a signal frame, no FDE, a pc outside every module, a register rule that
 * does not fit, a CFA outside the thread's stack or not above the last one)
 * makes the whole walk give up, and the caller unwinds with libunwind as
 * before: the result is never worse than libunwind's.
 *
 * The cache: a 4 KiB hot table (2^8 sets of 2 words) in front of one mmap of 2^16,
 * each word a pc tag and its rule, written and read as single 64-bit words
 * (no lock, no torn entry). A miss, and
 * every 256th walk of a thread, clears it (and the memo, and the modules
 * kept) when the loader's unload count (dlpi_subs) changed, and its "give
 * up" entries when the load count did.
 * See docs/unwinder.md.
 */
#ifndef HEAPSCOPE_CLIENT_CFA_H
#define HEAPSCOPE_CLIENT_CFA_H

#include <stdint.h>

#include "common.h"

/* Maps the cache. Returns 0, or -1 when the walker cannot be used. */
HS_HIDDEN int hs_cfa_init(void);

/* Unwinds from the caller's frame: buf[0] is the return address into the
 * caller, as unw_backtrace's list past its own frame. Returns the number of
 * pcs (at most want), or -1: give up, unwind another way. Needs this
 * thread's stack bounds in hs_thread_state (stack_known set). Call under
 * the guard (a miss calls dl_iterate_phdr). */
HS_HIDDEN int hs_cfa_backtrace(uint64_t *buf, uint32_t want);

/* The program unloaded an object (our dlclose, modules.c): the cache is
 * cleared now if the loader's unload count moved, not at the next miss or
 * 256th walk. Not under the loader lock. */
HS_HIDDEN void hs_cfa_note_unload(void);

/* A frame without a rule (JIT code, code without CFI, a signal frame): 0, the walk gives up
 * there (for libunwind behind it); 1, it steps the frame; 2, it steps and counts it (verify
 * mode: a shared counter has no place on the walk otherwise). Set at start. */
extern int hs_cfa_fp_steps HS_HIDDEN;

/* Counters of the cache, for tests and the verify mode. */
struct hs_cfa_stats {
  uint64_t misses, giveups;
  uint64_t fp_steps;   /* frames without a rule stepped, counted under verify only */
  uint64_t memo_hits;  /* misses answered from the memo of decoded FDEs */
  uint64_t memo_fills; /* FDEs decoded into it */
  uint64_t memo_fails; /* FDEs it could not hold (their misses run the program) */
  uint64_t memo_drops; /* times it was emptied: full, or an object unloaded */
};
HS_HIDDEN void hs_cfa_stats(struct hs_cfa_stats *out);

#ifdef HS_CFA_SELFTEST
/* Tests only: every pc of every FDE of the object whose code holds addr,
 * its rule through the memo of decoded FDEs against its FDE program run up
 * to it (cfa_eh.c). */
struct hs_cfa_selftest {
  uint64_t fdes, pcs, differ, kept; /* kept: FDEs in the memo at the end of their check */
  uint64_t first_differ[8];         /* pc - 1 of the first differences */
  uint64_t rules_hash;              /* of every pc's rule from its program: to compare builds */
};
HS_HIDDEN void hs_cfa_selftest(uintptr_t addr, struct hs_cfa_selftest *out);
#endif

#endif
