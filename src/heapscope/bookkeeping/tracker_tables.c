/* tracker_tables.c: growth and deletion for the tables of tracker_tables.h. */
#include "tracker_tables.h"

#include <stdlib.h>

/* ---- live sampled allocations ---- */

int hs_live_init(struct hs_live_table *t, size_t capacity) {
  t->slots = calloc(capacity, sizeof *t->slots);
  t->mask = capacity - 1;
  t->count = 0;
  return t->slots ? 0 : -1;
}

void hs_live_destroy(struct hs_live_table *t) {
  free(t->slots);
  t->slots = NULL;
  t->count = 0;
}

int hs_live_grow(struct hs_live_table *t) {
  size_t old_cap = t->mask + 1, new_cap = old_cap * 2;
  struct hs_live *slots = calloc(new_cap, sizeof *slots);
  if (!slots) return -1;
  struct hs_live_table grown = {slots, new_cap - 1, t->count};
  for (size_t i = 0; i < old_cap; i++) {
    if (t->slots[i].bucket_plus1) *hs_live_slot(&grown, t->slots[i].addr) = t->slots[i];
  }
  free(t->slots);
  *t = grown;
  return 0;
}

/* Backward-shift deletion: walk the probe run after the hole and pull back
 * every entry whose home slot does not lie strictly between the hole and
 * the entry (cyclically), so lookups never meet a gap in their run. */
void hs_live_remove(struct hs_live_table *t, struct hs_live *e) {
  size_t hole = (size_t)(e - t->slots), j = hole;
  for (;;) {
    j = (j + 1) & t->mask;
    struct hs_live *next = &t->slots[j];
    if (!next->bucket_plus1) break;
    size_t home = (size_t)hs_mix64(next->addr) & t->mask;
    /* Distance from its home to j, against distance from the hole to j. */
    if (((j - home) & t->mask) >= ((j - hole) & t->mask)) {
      t->slots[hole] = *next;
      hole = j;
    }
  }
  t->slots[hole].bucket_plus1 = 0;
  t->count--;
}

/* ---- stacks ---- */

int hs_stacks_init(struct hs_stacks *s, size_t capacity) {
  s->slots = calloc(capacity, sizeof *s->slots);
  s->mask = capacity - 1;
  s->ids_cap = capacity / 2;
  s->ids = calloc(s->ids_cap, sizeof *s->ids);
  s->count = 0;
  if (!s->slots || !s->ids) {
    hs_stacks_destroy(s);
    return -1;
  }
  return 0;
}

void hs_stacks_destroy(struct hs_stacks *s) {
  free(s->slots);
  free(s->ids);
  s->slots = NULL;
  s->ids = NULL;
  s->count = 0;
}

static struct hs_stack_slot *stacks_empty_slot(struct hs_stack_slot *slots, size_t mask,
                                               uint64_t stack_id) {
  size_t i = (size_t)hs_mix64(stack_id) & mask;
  while (slots[i].idx_plus1) i = (i + 1) & mask;
  return &slots[i];
}

static int stacks_grow(struct hs_stacks *s) {
  size_t old_cap = s->mask + 1, new_cap = old_cap * 2;
  struct hs_stack_slot *slots = calloc(new_cap, sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < old_cap; i++) {
    if (s->slots[i].idx_plus1) *stacks_empty_slot(slots, new_cap - 1, s->slots[i].stack_id) = s->slots[i];
  }
  free(s->slots);
  s->slots = slots;
  s->mask = new_cap - 1;
  return 0;
}

struct hs_stack_slot *hs_stacks_add(struct hs_stacks *s, uint64_t stack_id) {
  if (s->count >= UINT32_MAX - 1) return NULL; /* indices are u32 in hs_live */
  if ((s->count + 1) * 8 > (s->mask + 1) * 5 && stacks_grow(s) < 0) return NULL;
  if (s->count == s->ids_cap) {
    size_t cap = s->ids_cap * 2;
    uint64_t *ids = realloc(s->ids, cap * sizeof *ids);
    if (!ids) return NULL;
    s->ids = ids;
    s->ids_cap = cap;
  }
  size_t idx = s->count++;
  s->ids[idx] = stack_id;
  struct hs_stack_slot *slot = stacks_empty_slot(s->slots, s->mask, stack_id);
  *slot = (struct hs_stack_slot){stack_id, (uint32_t)(idx + 1), HS_NO_BUCKET};
  return slot;
}
