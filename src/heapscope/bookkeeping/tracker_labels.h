/*
 * tracker_labels.h: the label dimension of a heap tracker (tracker.h;
 * docs/labels.md). Only a process that sets labels pays for it: the
 * tracker makes its struct hs_labels at the first malloc that carries a
 * label set, and until then an op pays one predicted branch.
 *
 *   keys    (label set << 32 | stack index) -> totals, cur, at the peak and
 *           as last dumped (the peak saved lazily with the tracker's own
 *           epochs: a key not changed since the latest peak holds its state
 *           there in cur)
 *   live    addr -> its key, for the labelled live allocations only, so that
 *           a free finds what to take back from (the tracker's live table
 *           stays as it is)
 *
 * Rows are per (callsite, label set): hs_tracker_label_dump() the change
 * since the previous call (as hs_tracker_dump), hs_tracker_label_peak() the
 * state at the process's peak (as hs_tracker_peak, without peak windows).
 * A key whose stack has no callsite yet waits for a later dump.
 */
#ifndef HEAPSCOPE_TRACKER_LABELS_H
#define HEAPSCOPE_TRACKER_LABELS_H

#include <stdint.h>

#include "tracker.h"

struct hs_label_totals {
  struct hs_totals cur;
  struct hs_totals at_peak; /* when epoch == the peak's epoch */
  struct hs_totals dumped;
  uint64_t epoch;
};

struct hs_labels {
  struct hs_stacks keys;
  struct hs_label_totals *tot; /* by key index */
  size_t cap;
  struct hs_live_table live; /* stack_idx: the key index */
};

/* hs_tracker_label_dump(): one change of one (callsite, label set), signs as hs_dump_row. */
struct hs_label_dump_row {
  uint64_t callsite_id;
  uint64_t label_set;
  int64_t count;
  int64_t size;
  int64_t real_size;
};

/* hs_tracker_label_peak(): one (callsite, label set) at the process's peak, as hs_peak_row. */
struct hs_label_peak_row {
  uint64_t callsite_id;
  uint64_t label_set;
  uint64_t count;
  uint64_t size;
  uint64_t alloc_count;
  uint64_t alloc_size;
  uint64_t real_size;
  uint64_t alloc_real_size;
};

/* tracker.c's hooks: a labelled malloc (label_set != 0) of stack index idx,
 * and the free of a live allocation (t->labels set). */
void hs_labels_on_malloc(struct hs_tracker *t, uint32_t idx, const struct hs_op *op);
void hs_labels_on_free(struct hs_tracker *t, uint64_t addr);
void hs_labels_destroy(struct hs_labels *l);

int64_t hs_tracker_label_dump(struct hs_tracker *t); /* hs_label_dump_row; marks them dumped */
int64_t hs_tracker_label_peak(struct hs_tracker *t); /* hs_label_peak_row */

#endif /* HEAPSCOPE_TRACKER_LABELS_H */
