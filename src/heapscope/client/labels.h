/*
 * labels.h: allocation labels (docs/labels.md), the sampler layer beside
 * heaps.c. A thread's current label set is an id (wire.h, "Allocation
 * labels") that every sample carries:
 *
 *   C      heapscope_label_push/pop (include/heapscope.h): a stack in the
 *          thread's TLS; each level holds the id of the set it makes.
 *   Python heapscope.label (labels.py, _labels.c): the set bound to the Python
 *          context the call runs in (PyThreadState.context, the object
 *          contextvars hangs off), so that each asyncio task and thread
 *          has its own; a sample on a thread with Python state reads its
 *          thread state's current context and looks it up here.
 *
 * A sample asks hs_labels_sample() (one load and a predicted branch while no
 * label was ever set in the process); the set's LABELSET record goes out
 * from there when the session has not had it yet.
 */
#ifndef HEAPSCOPE_CLIENT_LABELS_H
#define HEAPSCOPE_CLIENT_LABELS_H

#include <stdint.h>

#include "common.h"

/* Set once any label is set in the process: samples before it pay one load. */
extern int hs_labels_used HS_HIDDEN;

HS_HIDDEN uint32_t hs_labels_sample_slow(void);

/* The calling thread's label set for a sample (0: none), its record sent to
 * this session if it had not been. In a sample's slow path, under the guard. */
static inline uint32_t hs_labels_sample(void) {
  if (HS_LIKELY(!__atomic_load_n(&hs_labels_used, __ATOMIC_RELAXED)))
    return 0;
  return hs_labels_sample_slow();
}

#endif
