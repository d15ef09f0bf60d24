/* arena: a bump arena reported to heapscope as custom heaps (docs/custom-heaps.md).
 *
 * One malloc'ed block backs the arena; objects are carved from it and
 * reported on the heap "test.arena" (session interval), and some on
 * "test.pool", registered with its own interval of 1 (every allocation,
 * whatever the session's). The first object has the address of the block
 * itself: the heaps keep separate address spaces.
 *
 * Ground truth per call path (heap test.arena unless said):
 *   make_nodes    NODES x NODE_SIZE, all live at exit
 *   make_strings  STRINGS x STRING_SIZE, all freed
 *   make_big      BIGS x BIG_SIZE, BIGS_FREED of them freed
 *   make_pooled   POOLED x POOLED_SIZE on test.pool, half freed
 * plus frees of addresses never reported, and a second free of one
 * reported address: all ignored. `--print-truth` prints
 *   heap <name> <function> <alloc_space> <alloc_objects> <space> <objects>
 * and the block itself as a truth line of the malloc heap (arena_new).
 * Output is the same with and without heapscope.
 */
#if defined(__has_include)
#if __has_include(<heapscope.h>)
#include <heapscope.h>
#else
#include "../../src/heapscope/include/heapscope.h"
#endif
#else
#include "../../src/heapscope/include/heapscope.h"
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "truth.h"

#define NODES 2000
#define NODE_SIZE 64
#define STRINGS 500
#define STRING_SIZE 208
#define BIGS 10
#define BIG_SIZE 100000
#define BIGS_FREED 4
#define POOLED 300
#define POOLED_SIZE 24
#define BLOCK_SIZE (4u << 20)

struct arena {
  unsigned char *base;
  size_t used, size;
};

static uint32_t arena_heap, pool_heap;

static struct arena *arena_new(size_t size) {
  struct arena *a = malloc(sizeof *a);
  a->base = malloc(size);
  a->used = 0;
  a->size = size;
  return a;
}

static void *arena_alloc(struct arena *a, size_t n, uint32_t heap) {
  n = (n + 15) & ~(size_t)15;
  if (a->used + n > a->size)
    return NULL;
  void *p = a->base + a->used;
  a->used += n;
  heapscope_heap_alloc(heap, p, n);
  return p;
}

/* A bump arena reclaims nothing; the report is what matters. */
static void arena_free(struct arena *a, void *p, uint32_t heap) {
  (void)a;
  heapscope_heap_free(heap, p);
}

static void *nodes[NODES], *strings[STRINGS], *bigs[BIGS], *pooled[POOLED];

static void make_nodes(struct arena *a) {
  for (int i = 0; i < NODES; i++) {
    nodes[i] = arena_alloc(a, NODE_SIZE, arena_heap);
    memset(nodes[i], i & 0xff, NODE_SIZE);
  }
}

static void make_strings(struct arena *a) {
  for (int i = 0; i < STRINGS; i++) {
    strings[i] = arena_alloc(a, STRING_SIZE, arena_heap);
    snprintf(strings[i], STRING_SIZE, "string %d", i);
  }
}

static void make_big(struct arena *a) {
  for (int i = 0; i < BIGS; i++)
    bigs[i] = memset(arena_alloc(a, BIG_SIZE, arena_heap), 7, BIG_SIZE);
}

static void make_pooled(struct arena *a) {
  for (int i = 0; i < POOLED; i++)
    pooled[i] = arena_alloc(a, POOLED_SIZE, pool_heap);
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    printf("heap test.arena make_nodes %d %d %d %d\n", NODES * NODE_SIZE, NODES, NODES * NODE_SIZE, NODES);
    printf("heap test.arena make_strings %d %d 0 0\n", STRINGS * STRING_SIZE, STRINGS);
    printf("heap test.arena make_big %d %d %d %d\n", BIGS * BIG_SIZE, BIGS, (BIGS - BIGS_FREED) * BIG_SIZE,
           BIGS - BIGS_FREED);
    printf("heap test.pool make_pooled %d %d %d %d\n", POOLED * 32, POOLED, POOLED / 2 * 32, POOLED / 2);
    truth_line("arena_new", BLOCK_SIZE + (long long)sizeof(struct arena), 2, 0, 0);
    return 0;
  }
  arena_heap = heapscope_heap_register("test.arena");
  pool_heap = heapscope_heap_register_interval("test.pool", 1);
  if (heapscope_heap_register("test.arena") != arena_heap) { /* the same heap again */
    fprintf(stderr, "arena: register is not idempotent\n");
    return 1;
  }
  struct arena *a = arena_new(BLOCK_SIZE);
  make_nodes(a);
  make_strings(a);
  make_big(a);
  make_pooled(a);
  for (int i = 0; i < STRINGS; i++)
    arena_free(a, strings[i], arena_heap);
  for (int i = 0; i < BIGS_FREED; i++)
    arena_free(a, bigs[i], arena_heap);
  for (int i = 0; i < POOLED; i += 2)
    arena_free(a, pooled[i], pool_heap);
  /* Ignored: never reported, reported on another heap, freed twice, NULL. */
  int local;
  arena_free(a, &local, arena_heap);
  arena_free(a, a->base + a->size - 16, arena_heap);
  arena_free(a, pooled[1], arena_heap);
  arena_free(a, strings[0], arena_heap);
  arena_free(a, NULL, arena_heap);
  unsigned long sum = 0;
  for (size_t i = 0; i < a->used; i++)
    sum = sum * 31 + a->base[i];
  printf("arena: %zu bytes used, checksum %lu\n", a->used, sum);
  free(a->base); /* the block goes back; the arena heap keeps its live objects (a leak) */
  free(a);
  return 0;
}
