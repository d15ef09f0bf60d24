/*
 * unwmemo.h: the native unwind of a sample, re-using the frames of this
 * thread's last one (issue 12: a Python sample's native stack is mostly the
 * same outer frames, main -> Py_RunMain -> ... -> the outermost
 * _PyEval_EvalFrameDefault, under a few frames that change).
 *
 * The walk is cfa.c's (the same rules, one step at a time through
 * hs_cfa_step_of), from the leaf. Each thread keeps its last complete walk
 * (one that reached the end of the stack): every frame's return address,
 * stack pointer (the CFA of the frame below) and rbp. When the new walk
 * reaches a frame with the stack pointer, return address and rbp of a kept
 * frame, the rest of the walk would read the same stack words as the kept
 * walk did: the return address at each CFA - 8 and the rbp saved at each
 * CFA - k8. Those words are read again and compared; when all are
 * unchanged, the kept frames are the rest of the stack (the walk is a
 * function of pc, sp, rbp, the rules and those words), else the walk goes
 * on step by step. The result is the walk's, frame for frame: a verify mode
 * (HEAPSCOPE_UNWIND_MEMO_VERIFY=1) runs both on every sample and counts
 * differences. The rules are cfa.c's cache: a memo is dropped when the
 * loader's unload count changes (looked at every 256th walk of a thread,
 * as cfa.c does).
 *
 * Off by default (HEAPSCOPE_UNWIND_MEMO=1 turns it on): measured with
 * benchmarks/pyhotpath.py (callgrind, CPython 3.11, pywork.py 40000), it
 * costs more than it saves against cfa.c's walk, ~21 instructions a frame:
 * 808 + 215 (the steps of the frames not kept) instructions a sample
 * against 962 for the plain walk, though nearly every walk ends on kept
 * frames (7.8 frames walked, 37.7 re-used on average). Re-reading a kept
 * frame's words and copying its pc costs about as much as a cached rule
 * step; a win needs a check much cheaper than that per frame.
 *
 * Memory: a fixed pool of memos, one per thread that claims one (the first
 * HS_UNWMEMO_THREADS threads that sample); a thread without one unwinds as
 * before. A memo is not given back when its thread ends.
 */
#ifndef HEAPSCOPE_CLIENT_UNWMEMO_H
#define HEAPSCOPE_CLIENT_UNWMEMO_H

#include <stdint.h>

#include "common.h"

#define HS_UNWMEMO_THREADS 16

/* 0: off (the default, or cfa.c's walk not in use), 1: on
 * (HEAPSCOPE_UNWIND_MEMO=1), 2: verify (HEAPSCOPE_UNWIND_MEMO_VERIFY=1). */
extern int hs_unwmemo_mode HS_HIDDEN;

/* After hs_unwind_init: on when cfa.c's walk is the unwinder in use. */
HS_HIDDEN void hs_unwmemo_init(int cfa_in_use);

/* As hs_cfa_backtrace: buf[0] is the return address into the caller;
 * returns the number of pcs (at most want), or -1: unwind another way. */
HS_HIDDEN int hs_unwmemo_backtrace(uint64_t *buf, uint32_t want);

/* Verify mode: both walks from one frame, the plain one's answer in buf,
 * differences counted and the first few printed; a summary at exit. */
HS_HIDDEN int hs_unwmemo_verify(uint64_t *buf, uint32_t want);

/* Counters (tests, the verify summary). */
struct hs_unwmemo_stats {
  uint64_t walks, hits, frames_reused, fell_back;
};
HS_HIDDEN void hs_unwmemo_stats(struct hs_unwmemo_stats *out);

#endif
