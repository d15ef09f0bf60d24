/*
 * tracker_order.h: operations that arrived ahead of their turn.
 *
 * MALLOC and FREE carry a per-process gapless sequence number, taken before
 * the ring write, so records of different threads land out of order. An op
 * whose predecessors have not all been applied waits here:
 *
 *   heap   binary min-heap on seq, in a growable array: the next op to apply
 *          is at heap[0].
 *   fifo   (seq, arrival time) in arrival order, to find the op that has
 *          waited longest without scanning the heap. Entries are dropped
 *          from its front lazily, once their seq is committed.
 *
 * NB: not thread-safe.
 */
#ifndef HEAPSCOPE_TRACKER_ORDER_H
#define HEAPSCOPE_TRACKER_ORDER_H

#include <stddef.h>
#include <stdint.h>

struct hs_op {
  uint64_t seq;
  uint64_t addr;
  uint64_t sample_size; /* MALLOC only */
  uint64_t alloc_size;  /* MALLOC only */
  uint64_t stack_id;    /* MALLOC only */
  uint64_t ts;          /* the op's (a FREE's: 0 when not known) */
  uint32_t kind;        /* HS_OP_MALLOC or HS_OP_FREE (tracker.h) */
  uint32_t tid;         /* MALLOC only: the allocating thread (0 = not known) */
  uint32_t label_set;   /* MALLOC only: its label set (0 = none; tracker_labels.h) */
  uint32_t pad_;
};

struct hs_arrival {
  uint64_t seq;
  uint64_t t_ns;
};

struct hs_pending {
  struct hs_op *heap;
  size_t n;
  size_t cap;
  struct hs_arrival *fifo; /* ring of fifo_cap (power of two) entries */
  size_t fifo_head;
  size_t fifo_len;
  size_t fifo_cap;
};

int hs_pending_init(struct hs_pending *p);
void hs_pending_destroy(struct hs_pending *p);
/* Stash op, which arrived at t_ns. -1 on ENOMEM (nothing changed). */
int hs_pending_push(struct hs_pending *p, const struct hs_op *op, uint64_t t_ns);
/* Remove heap[0] (n > 0) into *out. */
void hs_pending_pop(struct hs_pending *p, struct hs_op *out);
/* Arrival time of the op that has waited longest, forgetting fifo entries
 * whose seq is <= committed (already applied). 0 when nothing waits. */
uint64_t hs_pending_oldest(struct hs_pending *p, uint64_t committed);

#endif /* HEAPSCOPE_TRACKER_ORDER_H */
