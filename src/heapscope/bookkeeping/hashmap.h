/*
 * hashmap.h: the small containers of the resolver and the trie (stacks.h,
 * trie.h), in plain C: a map of (u64, u64) keys to u64 values and a growable
 * array of u64.
 *
 * NB: not thread-safe.
 */
#ifndef HEAPSCOPE_HASHMAP_H
#define HEAPSCOPE_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

/* Open addressing, linear probing, no deletion. */
struct hs_map_slot {
  uint64_t a, b; /* the key */
  uint64_t val;  /* value + 1; 0 = empty slot */
};

struct hs_map {
  struct hs_map_slot *slots; /* key and value side by side: a probe reads one cache line, not two */
  size_t mask;               /* capacity - 1; 0 before the first put */
  size_t count;
};

int hs_map_put(struct hs_map *m, uint64_t a, uint64_t b, uint64_t value); /* -1 on ENOMEM */
int hs_map_get(const struct hs_map *m, uint64_t a, uint64_t b, uint64_t *value); /* 1 when found */
void hs_map_destroy(struct hs_map *m);

struct hs_u64s {
  uint64_t *p;
  size_t len, cap;
};

int hs_u64s_push(struct hs_u64s *v, uint64_t x); /* -1 on ENOMEM */

#endif /* HEAPSCOPE_HASHMAP_H */
