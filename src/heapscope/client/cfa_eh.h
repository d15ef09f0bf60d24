/*
 * cfa_eh.h: the unwinder's two halves' shared terms (cfa.c: the caches and
 * the walk; cfa_eh.c: reading .eh_frame and running its programs, with the
 * memo of decoded FDEs). Private to the two.
 */
#ifndef HEAPSCOPE_CLIENT_CFA_EH_H
#define HEAPSCOPE_CLIENT_CFA_EH_H

#include <link.h>
#include <stdint.h>

#include "cfa.h"
#include "common.h"

/* Rule: bits 0-1 kind, 3-19 the CFA offset (a multiple of 8 below 2^20, in
 * place: one AND takes it out), 20-24 k (rbp at CFA - 8k; 0: rbp unchanged).
 * rsp-based rules are kind 0, so that the walk tests for them with one
 * TEST. */
enum { KIND_RSP = 0, KIND_RBP = 1, KIND_END = 2, KIND_GIVEUP = 3 };
#define OFF_BITS 20
#define OFF_MASK (((UINT64_C(1) << OFF_BITS) - 1) & ~UINT64_C(7))
#define K_BITS 5
#define RULE_BITS 25
#define RULE_MASK ((UINT64_C(1) << RULE_BITS) - 1)

static inline uint64_t make_rule(unsigned kind, uint64_t off, uint64_t k) {
  return kind | off | k << OFF_BITS;
}

/* The signal return trampoline's rule: a give-up to every walk but the CFA walk's own, which
 * reads the interrupted registers from the kernel's signal frame (cfa.c). */
#define RULE_SIGFRAME (KIND_GIVEUP | 8u)

/* Maps the memo of decoded FDEs (cfa_eh.c), unless HEAPSCOPE_UNWIND_MEMO=0;
 * without it every miss runs its FDE's program. */
HS_HIDDEN void hs_cfa_memo_init(void);
/* Empties the memo (an object was unloaded). In a dl_iterate_phdr callback. */
HS_HIDDEN void hs_cfa_memo_clear(void);
/* The memo's counters into out (its memo_* fields). */
HS_HIDDEN void hs_cfa_memo_stats(struct hs_cfa_stats *out);

/* The object's .eh_frame_hdr search table: its address, entries and count.
 * 0, or -1: none that the walk can read. */
HS_HIDDEN int hs_cfa_eh_table(const struct dl_phdr_info *info, uintptr_t *hdr_out,
                              const int32_t **table, uint64_t *count_out);

/* The rule for return address pc in this object (text_end: the end of the
 * executable segment that holds pc - 1; hdr 0: no table), or a KIND_GIVEUP
 * rule. In a dl_iterate_phdr callback (the loader's lock held). */
HS_HIDDEN uint64_t hs_cfa_rule_in(const struct dl_phdr_info *info, uintptr_t pc,
                                  uintptr_t text_end, uintptr_t hdr, const int32_t *table,
                                  uint64_t count);

#endif
