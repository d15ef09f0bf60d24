/* trie.c: the callsite trie of trie.h. */
#include "trie.h"

#include <stdlib.h>

int64_t hs_trie_child(struct hs_trie *t, uint32_t parent, uint32_t frame) {
  uint64_t id;
  if (hs_map_get(&t->nodes, parent, frame, &id)) return (int64_t)id;
  if (t->count >= UINT32_MAX - 1) return -1;
  if (t->count == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    uint32_t *p = realloc(t->parent, cap * sizeof *p), *f = p ? realloc(t->frame, cap * sizeof *f) : NULL;
    if (p) t->parent = p;
    if (f) t->frame = f;
    uint32_t *d = f ? realloc(t->depth, cap * sizeof *d) : NULL;
    if (!d) return -1;
    t->depth = d;
    t->cap = cap;
  }
  id = t->count + 1;
  if (hs_map_put(&t->nodes, parent, frame, id) < 0) return -1;
  t->parent[t->count] = parent;
  t->frame[t->count] = frame;
  t->depth[t->count] = parent ? t->depth[parent - 1] + 1 : 0;
  t->count++;
  return (int64_t)id;
}

void hs_trie_destroy(struct hs_trie *t) {
  hs_map_destroy(&t->nodes);
  free(t->parent);
  free(t->frame);
  free(t->depth);
  *t = (struct hs_trie){0};
}
