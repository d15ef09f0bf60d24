/* steps: a target whose phases a test drives through a FIFO (for `heapscope live`).
 *
 * Usage: steps FIFO
 * Opens FIFO for reading (so it waits for the test to open its writing end),
 * then takes one step per byte '\n' read from it, printing "step N done\n" after each:
 *   step 1: grow_one allocates 1000 x 1000 bytes (kept)
 *   step 2: grow_two allocates 100 x 50000 bytes (kept)
 *   step 3: free_one frees grow_one's blocks
 *   step 4 (or end of file): exits 0
 *
 * Ground truth at exit (every step taken):
 *   path                    alloc_space  alloc_objects  space    objects
 *   main > grow_one            1000000         1000           0        0
 *   main > grow_two            5000000          100     5000000      100
 * `--print-truth` prints these lines and exits without allocating.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#include "truth.h"

static void *one[1000];
static void *two[100];

static void grow_one(void) {
  for (int i = 0; i < 1000; i++) one[i] = malloc(1000);
}

static void grow_two(void) {
  for (int i = 0; i < 100; i++) two[i] = malloc(50000);
}

static void free_one(void) {
  for (int i = 0; i < 1000; i++) free(one[i]);
}

static void done(int step) {
  char line[32];
  int n = snprintf(line, sizeof line, "step %d done\n", step);
  if (write(1, line, (size_t)n) != n) abort();
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("grow_one", 1000000, 1000, 0, 0);
    truth_line("grow_two", 5000000, 100, 5000000, 100);
    return 0;
  }
  if (argc != 2) {
    if (write(2, "usage: steps FIFO\n", 18) != 18) return 2;
    return 2;
  }
  int fd = open(argv[1], O_RDONLY);
  if (fd < 0) return 1;
  for (int step = 1; step <= 3; step++) {
    char c = 0;
    while (c != '\n') {
      if (read(fd, &c, 1) != 1) return 0;
    }
    if (step == 1) grow_one();
    if (step == 2) grow_two();
    if (step == 3) free_one();
    done(step);
  }
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') {
  }
  done(4);
  return 0;
}
