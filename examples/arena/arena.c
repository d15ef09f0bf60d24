/* A small arena allocator that reports to heapscope (docs/custom-heaps.md).
 *
 *   cc -O2 -g -I"$(heapscope --include)" -o arena examples/arena/arena.c
 *   ./arena                                   # runs as usual: nothing is profiled
 *   heapscope record -o arena.db -- ./arena   # profiled: heap "example.arena"
 *   heapscope report arena.db                 # libc.malloc (the arena's 8 MiB block), heaps listed
 *   heapscope report arena.db --heap example.arena
 *   heapscope flamegraph arena.db             # the page's heap picker switches heaps
 *
 * (glibc older than 2.34: add -ldl.)
 */
#include <heapscope.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct arena {
  unsigned char *base;
  size_t used, size;
  uint32_t heap; /* 0 when not profiled: the reports cost one branch */
  const char *heap_name;
};

static int arena_init(struct arena *a, size_t size, const char *heap_name) {
  a->base = malloc(size);
  a->used = 0;
  a->size = size;
  a->heap_name = heap_name;
  a->heap = heapscope_heap_register(heap_name);
  return a->base ? 0 : -1;
}

static void *arena_alloc(struct arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n > a->size - a->used)
    return NULL;
  void *p = a->base + a->used;
  a->used += n;
  heapscope_heap_alloc(a->heap, p, n);
  return p;
}

/* Everything goes back at once: report each live object's free first. */
static void arena_reset(struct arena *a, void **objects, size_t count) {
  for (size_t i = 0; i < count; i++)
    heapscope_heap_free(a->heap, objects[i]);
  a->used = 0;
  /* Not profiled at start-up: register again, so that `heapscope record -p`
   * attached since gets the heap from here on (costs a dlsym while not). */
  if (a->heap == 0)
    a->heap = heapscope_heap_register(a->heap_name);
}

struct token {
  char text[40];
  int kind;
};

static struct token *lex_one(struct arena *a, int i) {
  struct token *t = arena_alloc(a, sizeof *t);
  snprintf(t->text, sizeof t->text, "tok%d", i);
  t->kind = i % 7;
  return t;
}

static char *intern_name(struct arena *a, int i) {
  char *s = arena_alloc(a, 100);
  snprintf(s, 100, "name-%d", i);
  return s;
}

int main(void) {
  struct arena a;
  if (arena_init(&a, 8u << 20, "example.arena") != 0)
    return 1;
  static void *live[100000];
  size_t n = 0;
  long kinds = 0;
  for (int round = 0; round < 10; round++) {
    for (int i = 0; i < 5000; i++) {
      struct token *t = lex_one(&a, i);
      kinds += t->kind;
      live[n++] = t;
    }
    for (int i = 0; i < 500; i++)
      live[n++] = intern_name(&a, i);
    if (round < 9)
      arena_reset(&a, live, n), n = 0; /* the last round stays: it shows as live */
  }
  printf("kinds %ld, %zu objects live, %zu bytes used\n", kinds, n, a.used);
  free(a.base);
  return 0;
}
