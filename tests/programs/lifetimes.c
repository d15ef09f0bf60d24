/* lifetimes: paths whose allocations live for known times, of known sizes.
 *
 * Ground truth (interval 1):
 *   path                 alloc_space  alloc_objects  space   objects  lifetime          size bucket
 *   main > path_temp        5120000        20000          0        0  freed at once     [256, 512)
 *       20000 x malloc(256), each freed right after it (no malloc between):
 *       all temporary by any threshold of 1 ms, and by heaptrack's definition
 *   main > path_hold         819200          200          0        0  >= HOLD_MS ms     [4096, 8192)
 *       200 x malloc(4096) kept, then path_never's mallocs, then a wait until HOLD_MS
 *       ms have passed on CLOCK_MONOTONIC since the last of them, then all freed: no
 *       lifetime under HOLD_MS ms, none temporary by heaptrack's definition
 *   main > path_never       5000000           50    5000000       50  never freed       [65536, 131072)
 *       50 x malloc(100000), kept to the end
 * `--print-truth` prints the truth lines and, for the lifetime tests, one line
 * `lifetimes TEMP_N HOLD_N HOLD_MS NEVER_N`.
 *
 * `lifetimes FIFO` (for `heapscope live`): opens FIFO for reading, runs the paths at
 * the first '\n' read from it, prints "paths done", and exits at the next '\n' (or
 * the end of file), so the view can be read while the process still runs.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "truth.h"

#define TEMP_N 20000
#define TEMP_SIZE 256
#define HOLD_N 200
#define HOLD_SIZE 4096
#define HOLD_MS 10
#define NEVER_N 50
#define NEVER_SIZE 100000

static void *hold_blocks[HOLD_N];
static void *never_blocks[NEVER_N];

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void temp_once(void) {
  void *p = malloc(TEMP_SIZE);
  truth_sink = p;
  free(p);
}
static void path_temp(void) {
  for (int i = 0; i < TEMP_N; i++) temp_once();
}

static void hold_alloc(void) {
  for (int i = 0; i < HOLD_N; i++) hold_blocks[i] = malloc(HOLD_SIZE);
}
static void path_hold(void) { hold_alloc(); }

static void never_alloc(void) {
  for (int i = 0; i < NEVER_N; i++) never_blocks[i] = malloc(NEVER_SIZE);
}
static void path_never(void) { never_alloc(); }

/* Waits (no allocation) until HOLD_MS ms after `since`, then frees the held blocks. */
static void release_holds(long long since) {
  struct timespec step = {0, 1000000};
  while (now_ns() - since < HOLD_MS * 1000000LL) nanosleep(&step, NULL);
  for (int i = 0; i < HOLD_N; i++) free(hold_blocks[i]);
}

/* Reads up to a '\n': 1, or 0 at the end of file (or an error). */
static int next_line(int fd) {
  char c = 0;
  while (c != '\n') {
    if (read(fd, &c, 1) != 1) return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("path_temp", (long long)TEMP_N * TEMP_SIZE, TEMP_N, 0, 0);
    truth_line("path_hold", (long long)HOLD_N * HOLD_SIZE, HOLD_N, 0, 0);
    truth_line("path_never", (long long)NEVER_N * NEVER_SIZE, NEVER_N, (long long)NEVER_N * NEVER_SIZE, NEVER_N);
    printf("lifetimes %d %d %d %d\n", TEMP_N, HOLD_N, HOLD_MS, NEVER_N);
    return 0;
  }
  int fd = -1;
  if (argc == 2) {
    fd = open(argv[1], O_RDONLY);
    if (fd < 0 || !next_line(fd)) return 1;
  }
  path_hold();
  long long held_since = now_ns();
  path_never();
  path_temp();
  release_holds(held_since);
  truth_sink = never_blocks;
  if (fd >= 0) {
    if (write(1, "paths done\n", 11) != 11) return 1;
    (void)next_line(fd);
  }
  return 0;
}
