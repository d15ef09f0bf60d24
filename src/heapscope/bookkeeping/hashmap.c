/* hashmap.c: the map and the array of hashmap.h. */
#include "hashmap.h"

#include <stdlib.h>

#include "tracker_tables.h" /* hs_mix64 */

static size_t map_slot(const struct hs_map *m, uint64_t a, uint64_t b) {
  size_t i = (size_t)hs_mix64(a ^ hs_mix64(b)) & m->mask;
  while (m->slots[i].val && (m->slots[i].a != a || m->slots[i].b != b)) i = (i + 1) & m->mask;
  return i;
}

/* Four times the capacity up to 2^18 slots (6 MiB), twice beyond (64 slots at first): a
   compiler's trie grows to ~10^5 nodes, and each growth moves every slot (moving them took
   as long as all the lookups of its resolve); beyond, a map is never more than twice the
   size doubling would make it. -1 on ENOMEM. */
static int map_grow(struct hs_map *m) {
  size_t cap = m->mask ? (m->mask + 1) * (m->mask < (1u << 16) ? 4 : 2) : 64;
  struct hs_map bigger = {calloc(cap, sizeof(struct hs_map_slot)), cap - 1, m->count};
  if (!bigger.slots) return -1;
  for (size_t i = 0; m->mask && i <= m->mask; i++) {
    if (!m->slots[i].val) continue;
    /* The keys are distinct: the first free slot from the key's own. */
    size_t j = (size_t)hs_mix64(m->slots[i].a ^ hs_mix64(m->slots[i].b)) & bigger.mask;
    while (bigger.slots[j].val) j = (j + 1) & bigger.mask;
    bigger.slots[j] = m->slots[i];
  }
  free(m->slots);
  *m = bigger;
  return 0;
}

int hs_map_put(struct hs_map *m, uint64_t a, uint64_t b, uint64_t value) {
  if ((m->count + 1) * 4 > (m->mask ? m->mask + 1 : 0) * 3 && map_grow(m) < 0) return -1; /* load <= 3/4 */
  size_t i = map_slot(m, a, b);
  if (!m->slots[i].val) m->count++;
  m->slots[i] = (struct hs_map_slot){a, b, value + 1};
  return 0;
}

int hs_map_get(const struct hs_map *m, uint64_t a, uint64_t b, uint64_t *value) {
  if (!m->count) return 0;
  size_t i = map_slot(m, a, b);
  if (!m->slots[i].val) return 0;
  *value = m->slots[i].val - 1;
  return 1;
}

void hs_map_destroy(struct hs_map *m) {
  free(m->slots);
  *m = (struct hs_map){0};
}

int hs_u64s_push(struct hs_u64s *v, uint64_t x) {
  if (v->len == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 256;
    uint64_t *p = realloc(v->p, cap * sizeof *p);
    if (!p) return -1;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->len++] = x;
  return 0;
}
