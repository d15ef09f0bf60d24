/* tracker_labels.c: the label dimension of a heap tracker (tracker_labels.h). */
#include "tracker_labels.h"

#include <stdlib.h>
#include <string.h>

#define LABEL_LIVE_INITIAL 256
#define LABEL_KEYS_INITIAL 256

static struct hs_labels *labels_of(struct hs_tracker *t) {
  if (t->labels) return t->labels;
  struct hs_labels *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  if (hs_stacks_init(&l->keys, LABEL_KEYS_INITIAL) < 0) {
    free(l);
    return NULL;
  }
  if (hs_live_init(&l->live, LABEL_LIVE_INITIAL) < 0) {
    hs_stacks_destroy(&l->keys);
    free(l);
    return NULL;
  }
  t->labels = l;
  return l;
}

void hs_labels_destroy(struct hs_labels *l) {
  if (!l) return;
  hs_stacks_destroy(&l->keys);
  hs_live_destroy(&l->live);
  free(l->tot);
  free(l);
}

/* Saves x's state at the latest peak before its first change after it. */
static inline void touch(struct hs_label_totals *x, uint64_t epoch) {
  if (x->epoch != epoch) {
    x->at_peak = x->cur;
    x->epoch = epoch;
  }
}

void hs_labels_on_malloc(struct hs_tracker *t, uint32_t idx, const struct hs_op *op) {
  struct hs_labels *l = labels_of(t);
  if (!l || hs_live_reserve(&l->live) < 0) {
    t->oom = 1;
    return;
  }
  struct hs_stack_slot *k = hs_stacks_get(&l->keys, (uint64_t)op->label_set << 32 | idx);
  if (!k) {
    t->oom = 1;
    return;
  }
  const size_t i = k->idx_plus1 - 1;
  if (i >= l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    while (cap <= i) cap *= 2;
    struct hs_label_totals *n = realloc(l->tot, cap * sizeof *n);
    if (!n) {
      t->oom = 1;
      return;
    }
    memset(n + l->cap, 0, (cap - l->cap) * sizeof *n);
    for (size_t j = l->cap; j < cap; j++) n[j].epoch = t->pk->peak_epoch; /* zero at the peak */
    l->tot = n;
    l->cap = cap;
  }
  /* The tracker booked the implicit free of a live address already (hs_labels_on_free). */
  struct hs_live *e = hs_live_slot(&l->live, op->addr);
  if (!e->bucket_plus1) {
    e->addr = op->addr;
    l->live.count++;
  }
  e->seq = op->seq;
  e->sample_size = op->sample_size;
  e->alloc_size = op->alloc_size;
  e->stack_idx = (uint32_t)i;
  e->bucket_plus1 = 1;
  struct hs_label_totals *x = &l->tot[i];
  touch(x, t->pk->peak_epoch);
  x->cur.alloc_bytes += op->sample_size;
  x->cur.alloc_count++;
  x->cur.alloc_real += op->alloc_size;
}

void hs_labels_on_free(struct hs_tracker *t, uint64_t addr) {
  struct hs_labels *l = t->labels;
  struct hs_live *e = l->live.count ? hs_live_find(&l->live, addr) : NULL;
  if (!e) return;
  struct hs_label_totals *x = &l->tot[e->stack_idx];
  touch(x, t->pk->peak_epoch);
  x->cur.free_bytes += e->sample_size;
  x->cur.free_count++;
  x->cur.free_real += e->alloc_size;
  hs_live_remove(&l->live, e);
}

/* The callsite of key i's stack, 0 while not known. */
static uint64_t callsite_of(struct hs_tracker *t, uint64_t key) {
  const uint64_t stack_id = t->stacks.ids[(uint32_t)key];
  const struct hs_stack_slot *s = hs_stacks_get(&t->stacks, stack_id); /* there: no add */
  return s && s->bucket != HS_NO_BUCKET ? t->rest[s->bucket].callsite_id : 0;
}

static size_t keys_booked(const struct hs_labels *l) {
  /* Keys past cap (a growth that failed) booked nothing. */
  return l == NULL ? 0 : l->keys.count < l->cap ? l->keys.count : l->cap;
}

static void *rows_out(struct hs_tracker *t, size_t n, size_t row_size) {
  t->out.len = 0;
  if (hs_buf_reserve(&t->out, n * row_size + 1) < 0) return NULL;
  return t->out.p;
}

int64_t hs_tracker_label_dump(struct hs_tracker *t) {
  struct hs_labels *l = t->labels;
  const size_t n = keys_booked(l);
  struct hs_label_dump_row *row = rows_out(t, 2 * n, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < n; i++) {
    const uint64_t key = l->keys.ids[i];
    const uint64_t callsite_id = callsite_of(t, key);
    if (callsite_id == 0) continue;
    struct hs_label_totals *x = &l->tot[i];
    const struct hs_totals now = x->cur, *d = &x->dumped;
    if (now.alloc_count != d->alloc_count || now.alloc_bytes != d->alloc_bytes) {
      *row++ = (struct hs_label_dump_row){callsite_id, key >> 32, (int64_t)(now.alloc_count - d->alloc_count),
                                          (int64_t)(now.alloc_bytes - d->alloc_bytes),
                                          (int64_t)(now.alloc_real - d->alloc_real)};
    }
    if (now.free_count != d->free_count || now.free_bytes != d->free_bytes) {
      *row++ = (struct hs_label_dump_row){callsite_id, key >> 32, (int64_t)(d->free_count - now.free_count),
                                          (int64_t)(d->free_bytes - now.free_bytes),
                                          (int64_t)(d->free_real - now.free_real)};
    }
    x->dumped = now;
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}

int64_t hs_tracker_label_peak(struct hs_tracker *t) {
  struct hs_labels *l = t->labels;
  const size_t n = keys_booked(l);
  struct hs_label_peak_row *row = rows_out(t, n, sizeof *row), *first = row;
  if (!row) return -1;
  for (size_t i = 0; i < n; i++) {
    const uint64_t key = l->keys.ids[i];
    const uint64_t callsite_id = callsite_of(t, key);
    const struct hs_label_totals *x = &l->tot[i];
    const struct hs_totals p = x->epoch != t->pk->peak_epoch ? x->cur : x->at_peak;
    if (callsite_id == 0 || p.alloc_count == 0) continue;
    *row++ = (struct hs_label_peak_row){callsite_id, key >> 32, p.alloc_count - p.free_count,
                                        p.alloc_bytes - p.free_bytes, p.alloc_count, p.alloc_bytes,
                                        p.alloc_real - p.free_real, p.alloc_real};
  }
  t->out.len = (size_t)(row - first) * sizeof *row;
  return row - first;
}
