/* free_path: frees of unsampled addresses with many sampled addresses live,
 * for benchmarks/free_path.py (instruction and cache-miss counts under
 * callgrind, never wall time).
 *
 * Usage: free_path PATTERN HELD HELD_SIZE LIST LIST_SIZE ROUNDS
 *   HELD blocks of HELD_SIZE bytes are allocated first and kept to the end
 *   (at the session's interval, about HELD * HELD_SIZE / interval of them are
 *   sampled: the live sampled addresses), then ROUNDS times a list of LIST
 *   blocks of LIST_SIZE bytes is built and freed:
 *     seq   in the order it was built (a program dropping a list)
 *     rand  in a random order (a fixed xorshift permutation)
 *     held  no lists: the held blocks are freed, in order, at the end
 *   The held blocks are otherwise never freed (the process exits), so that
 *   every free counted is one of the pattern's.
 * Prints a checksum so that nothing is optimized away.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile size_t sink;

static uint64_t rnd_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void) {
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return rnd_state;
}

static __attribute__((noinline)) void build(char **list, long n, size_t size) {
  for (long i = 0; i < n; i++) {
    list[i] = malloc(size);
    if (list[i] == NULL)
      abort();
    list[i][0] = (char)i;
  }
}

static __attribute__((noinline)) void drop(char **list, const long *order, long n) {
  for (long i = 0; i < n; i++) {
    char *p = list[order ? order[i] : i];
    sink += (size_t)p[0];
    free(p);
  }
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: free_path seq|rand|held HELD HELD_SIZE LIST LIST_SIZE ROUNDS\n");
    return 2;
  }
  const char *pattern = argv[1];
  long held = atol(argv[2]);
  size_t held_size = (size_t)atol(argv[3]);
  long n = atol(argv[4]);
  size_t size = (size_t)atol(argv[5]);
  long rounds = atol(argv[6]);
  char **kept = calloc((size_t)(held > 0 ? held : 1), sizeof *kept);
  char **list = calloc((size_t)(n > 0 ? n : 1), sizeof *list);
  long *order = calloc((size_t)(n > 0 ? n : 1), sizeof *order);
  if (!kept || !list || !order)
    return 1;
  build(kept, held, held_size);
  for (long i = 0; i < n; i++)
    order[i] = i;
  for (long i = n - 1; i > 0; i--) {
    long j = (long)(rnd() % (uint64_t)(i + 1));
    long t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  if (strcmp(pattern, "held") == 0) {
    drop(kept, NULL, held);
  } else {
    int random = strcmp(pattern, "rand") == 0;
    for (long r = 0; r < rounds; r++) {
      build(list, n, size);
      drop(list, random ? order : NULL, n);
    }
  }
  printf("%zu\n", (size_t)sink);
  fflush(stdout);
  _exit(0); /* the held blocks stay live: no free of theirs is counted */
}
