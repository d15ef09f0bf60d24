/* threadsteps: two named threads and main allocate known, distinct amounts from
 * distinct functions, driven through a FIFO (for `heapscope live`'s thread filter).
 *
 * Usage: threadsteps FIFO
 * Starts two threads, which name themselves "hs-alpha" and "hs-beta"
 * (pthread_setname_np, before they allocate anything) and wait. Then it opens
 * FIFO for reading (so it waits for the test to open its writing end) and
 * takes one step per '\n' read from it, printing "step N done\n" after each:
 *   step 1: alpha_work (in hs-alpha) allocates 300 x 1000 bytes, beta_work
 *           (in hs-beta) 40 x 20000 bytes, main_work (in main) 10 x 3000
 *           bytes, all kept; "step 1 done" once the three have finished
 *   step 2 (or end of file): the threads end, are joined, and it exits 0
 * The threads live until step 2, so their names can be read from /proc.
 *
 * Ground truth at exit (every step taken):
 *   function     thread     alloc_space  alloc_objects  space    objects
 *   alpha_work   hs-alpha        300000          300     300000      300
 *   beta_work    hs-beta         800000           40     800000       40
 *   main_work    main             30000           10      30000       10
 * `--print-truth` prints these lines and exits without allocating.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "truth.h"

#define ALPHA_N 300
#define ALPHA_SIZE 1000
#define BETA_N 40
#define BETA_SIZE 20000
#define MAIN_N 10
#define MAIN_SIZE 3000

static void *alpha_blocks[ALPHA_N], *beta_blocks[BETA_N], *main_blocks[MAIN_N];
/* 0: wait, 1: allocate now, 2: end */
static int phase;
static int finished; /* threads that allocated */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;

static void alpha_work(void) {
  for (int i = 0; i < ALPHA_N; i++) alpha_blocks[i] = malloc(ALPHA_SIZE);
}

static void beta_work(void) {
  for (int i = 0; i < BETA_N; i++) beta_blocks[i] = malloc(BETA_SIZE);
}

static void main_work(void) {
  for (int i = 0; i < MAIN_N; i++) main_blocks[i] = malloc(MAIN_SIZE);
}

/* Wait until phase reaches `want`. */
static void await_phase(int want) {
  pthread_mutex_lock(&lock);
  while (phase < want) pthread_cond_wait(&changed, &lock);
  pthread_mutex_unlock(&lock);
}

static void set_phase(int p) {
  pthread_mutex_lock(&lock);
  phase = p;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
}

static void *run(void *arg) {
  void (*work)(void) = arg == NULL ? alpha_work : beta_work;
  if (pthread_setname_np(pthread_self(), arg == NULL ? "hs-alpha" : "hs-beta") != 0) abort();
  await_phase(1);
  pthread_mutex_lock(&lock);
  int ended = phase == 2; /* end of file before step 1: nothing to do */
  pthread_mutex_unlock(&lock);
  if (!ended) work();
  pthread_mutex_lock(&lock);
  finished++;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
  await_phase(2);
  return NULL;
}

static void done(int step) {
  char line[32];
  int n = snprintf(line, sizeof line, "step %d done\n", step);
  if (write(1, line, (size_t)n) != n) abort();
}

/* Read up to the next '\n'; 0 at end of file. */
static int next_line(int fd) {
  char c = 0;
  while (c != '\n') {
    if (read(fd, &c, 1) != 1) return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("alpha_work", (long long)ALPHA_N * ALPHA_SIZE, ALPHA_N, (long long)ALPHA_N * ALPHA_SIZE, ALPHA_N);
    truth_line("beta_work", (long long)BETA_N * BETA_SIZE, BETA_N, (long long)BETA_N * BETA_SIZE, BETA_N);
    truth_line("main_work", (long long)MAIN_N * MAIN_SIZE, MAIN_N, (long long)MAIN_N * MAIN_SIZE, MAIN_N);
    return 0;
  }
  if (argc != 2) {
    if (write(2, "usage: threadsteps FIFO\n", 24) != 24) return 2;
    return 2;
  }
  pthread_t alpha, beta;
  static char beta_arg;
  if (pthread_create(&alpha, NULL, run, NULL) != 0 || pthread_create(&beta, NULL, run, &beta_arg) != 0) return 1;
  int fd = open(argv[1], O_RDONLY);
  if (fd < 0) return 1;
  if (next_line(fd)) {
    set_phase(1);
    main_work();
    pthread_mutex_lock(&lock);
    while (finished < 2) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    done(1);
    next_line(fd);
  }
  set_phase(2);
  pthread_join(alpha, NULL);
  pthread_join(beta, NULL);
  done(2);
  return 0;
}
