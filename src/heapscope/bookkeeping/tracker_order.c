/* tracker_order.c: the pending-operation heap and its arrival fifo. */
#include "tracker_order.h"

#include <stdlib.h>

#define HS_PENDING_INITIAL 64

int hs_pending_init(struct hs_pending *p) {
  p->n = 0;
  p->cap = HS_PENDING_INITIAL;
  p->heap = malloc(p->cap * sizeof *p->heap);
  p->fifo_head = 0;
  p->fifo_len = 0;
  p->fifo_cap = HS_PENDING_INITIAL;
  p->fifo = malloc(p->fifo_cap * sizeof *p->fifo);
  if (!p->heap || !p->fifo) {
    hs_pending_destroy(p);
    return -1;
  }
  return 0;
}

void hs_pending_destroy(struct hs_pending *p) {
  free(p->heap);
  free(p->fifo);
  p->heap = NULL;
  p->fifo = NULL;
  p->n = p->cap = p->fifo_len = p->fifo_cap = 0;
}

static int fifo_grow(struct hs_pending *p) {
  size_t cap = p->fifo_cap * 2;
  struct hs_arrival *fifo = malloc(cap * sizeof *fifo);
  if (!fifo) return -1;
  for (size_t i = 0; i < p->fifo_len; i++) fifo[i] = p->fifo[(p->fifo_head + i) & (p->fifo_cap - 1)];
  free(p->fifo);
  p->fifo = fifo;
  p->fifo_head = 0;
  p->fifo_cap = cap;
  return 0;
}

int hs_pending_push(struct hs_pending *p, const struct hs_op *op, uint64_t t_ns) {
  if (p->n == p->cap) {
    struct hs_op *heap = realloc(p->heap, p->cap * 2 * sizeof *heap);
    if (!heap) return -1;
    p->heap = heap;
    p->cap *= 2;
  }
  if (p->fifo_len == p->fifo_cap && fifo_grow(p) < 0) return -1;
  p->fifo[(p->fifo_head + p->fifo_len++) & (p->fifo_cap - 1)] = (struct hs_arrival){op->seq, t_ns};

  /* Sift up. */
  size_t i = p->n++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (p->heap[parent].seq <= op->seq) break;
    p->heap[i] = p->heap[parent];
    i = parent;
  }
  p->heap[i] = *op;
  return 0;
}

void hs_pending_pop(struct hs_pending *p, struct hs_op *out) {
  *out = p->heap[0];
  struct hs_op last = p->heap[--p->n];
  /* Sift the last element down from the root. */
  size_t i = 0;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= p->n) break;
    if (child + 1 < p->n && p->heap[child + 1].seq < p->heap[child].seq) child++;
    if (last.seq <= p->heap[child].seq) break;
    p->heap[i] = p->heap[child];
    i = child;
  }
  if (p->n > 0) p->heap[i] = last;
}

uint64_t hs_pending_oldest(struct hs_pending *p, uint64_t committed) {
  if (p->n == 0) {
    /* Everything stashed has been applied. */
    p->fifo_head = 0;
    p->fifo_len = 0;
    return 0;
  }
  while (p->fifo_len > 0) {
    const struct hs_arrival *a = &p->fifo[p->fifo_head];
    if (a->seq > committed) return a->t_ns;
    p->fifo_head = (p->fifo_head + 1) & (p->fifo_cap - 1);
    p->fifo_len--;
  }
  return 0; /* unreachable while heap and fifo agree */
}
