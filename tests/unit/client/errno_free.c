/* Target program for test_client.py's errno test: argv[1] mallocs of 100
 * bytes (every one sampled at interval 1), then their frees, each with
 * errno set to a marker before it and read after it. Prints how many frees
 * changed errno; exit status 0. The pointers live in a static array, so
 * that the only 100-byte mallocs are these. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_BLOCKS 4096
static void *blocks[MAX_BLOCKS];
static void *volatile sink;

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 0;
  if (n < 0 || n > MAX_BLOCKS)
    return 2;
  for (int i = 0; i < n; i++) {
    blocks[i] = malloc(100);
    sink = blocks[i];
  }
  int changed = 0;
  for (int i = 0; i < n; i++) {
    errno = 4242;
    free(blocks[i]);
    changed += errno != 4242;
  }
  printf("errno changed by %d of %d frees\n", changed, n);
  return 0;
}
