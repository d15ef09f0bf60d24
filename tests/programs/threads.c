/* threads: 8 threads allocate blocks and free each other's, handing them off
 * through a shared ring under a mutex, so freed addresses are reused by other
 * threads while the profile runs.
 *
 * Thread t (0..7) runs worker_t > run_worker, which makes N_BLOCKS blocks with
 * make_block (size 16*(t+1) + 8*(j%4) for block j) and pushes each into the ring;
 * when the ring is full it first pops the oldest block, whoever made it, and frees
 * it. run_worker also keeps N_KEPT blocks of 1000+t bytes (keep_block) for ever.
 * After joining, main frees every block left in the ring. So every handed-off block
 * is freed exactly once, by some thread, and what stays is exactly the kept blocks.
 *
 * Ground truth per worker_t (views at exit), with N_BLOCKS=20000, N_KEPT=10:
 *   alloc_space   = 20000*16*(t+1) + 5000*(0+8+16+24) + 10*(1000+t)
 *   alloc_objects = 20010
 *   space         = 10*(1000+t)
 *   objects       = 10
 * e.g. worker_0: 570000 20010 10000 10; worker_7: 2810070 20010 10070 10.
 * `--print-truth` prints one line per worker and exits without allocating.
 */
#include <pthread.h>
#include <stdlib.h>

#include "truth.h"

#define N_THREADS 8
#define N_BLOCKS 20000
#define N_KEPT 10
#define RING 256

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t start_line;
static void *ring[RING];
static size_t ring_head, ring_len; /* oldest at ring_head */
static void *kept[N_THREADS][N_KEPT];

static size_t block_size(int t, int j) { return 16 * (size_t)(t + 1) + 8 * (size_t)(j % 4); }

static void *make_block(size_t size) {
  char *p = malloc(size);
  p[0] = (char)size;
  return p;
}

static void *keep_block(size_t size) { return malloc(size); }

static void *run_worker(int t) {
  pthread_barrier_wait(&start_line);
  for (int j = 0; j < N_BLOCKS; j++) {
    void *p = make_block(block_size(t, j));
    void *victim = NULL;
    pthread_mutex_lock(&ring_lock);
    if (ring_len == RING) {
      victim = ring[ring_head];
      ring_head = (ring_head + 1) % RING;
      ring_len--;
    }
    ring[(ring_head + ring_len) % RING] = p;
    ring_len++;
    pthread_mutex_unlock(&ring_lock);
    free(victim);
    if (j % (N_BLOCKS / N_KEPT) == 0) kept[t][j / (N_BLOCKS / N_KEPT)] = keep_block(1000 + t);
  }
  return NULL;
}

#define WORKER(n) \
  static void *worker_##n(void *arg) { \
    (void)arg; \
    return run_worker(n); \
  }
WORKER(0)
WORKER(1)
WORKER(2)
WORKER(3)
WORKER(4)
WORKER(5)
WORKER(6)
WORKER(7)

static void *(*const workers[N_THREADS])(void *) = {worker_0, worker_1, worker_2, worker_3,
                                                    worker_4, worker_5, worker_6, worker_7};

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    for (int t = 0; t < N_THREADS; t++) {
      long long alloc = 0;
      for (int j = 0; j < N_BLOCKS; j++) alloc += block_size(t, j);
      alloc += N_KEPT * (1000LL + t);
      char name[16];
      snprintf(name, sizeof name, "worker_%d", t);
      truth_line(name, alloc, N_BLOCKS + N_KEPT, N_KEPT * (1000LL + t), N_KEPT);
    }
    return 0;
  }
  pthread_t tids[N_THREADS];
  pthread_barrier_init(&start_line, NULL, N_THREADS);
  for (int t = 0; t < N_THREADS; t++)
    if (pthread_create(&tids[t], NULL, workers[t], NULL) != 0) abort();
  for (int t = 0; t < N_THREADS; t++) pthread_join(tids[t], NULL);
  while (ring_len > 0) {
    free(ring[ring_head]);
    ring_head = (ring_head + 1) % RING;
    ring_len--;
  }
  truth_sink = kept;
  return 0;
}
