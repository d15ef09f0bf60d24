/*
 * trie.h: the callsite trie, in plain C: one node per distinct path of
 * frames from the root, shared by every process of a recording (as
 * heapprofd's GlobalCallstackTrie). Ids start at 1 in creation order and are
 * never reused, so a callsite id means the same path in every dump.
 *
 * NB: not thread-safe.
 */
#ifndef HEAPSCOPE_TRIE_H
#define HEAPSCOPE_TRIE_H

#include <stddef.h>
#include <stdint.h>

#include "hashmap.h"

struct hs_trie {
  struct hs_map nodes; /* (parent id or 0, frame id) -> node id */
  uint32_t *parent, *frame, *depth; /* by node id - 1 */
  size_t count, cap;
  size_t taken; /* nodes up to this id were handed out by take_new */
};

/* The node of `frame` under `parent` (0: a root), made when missing; -1 on ENOMEM. */
int64_t hs_trie_child(struct hs_trie *t, uint32_t parent, uint32_t frame);
void hs_trie_destroy(struct hs_trie *t);

#endif /* HEAPSCOPE_TRIE_H */
