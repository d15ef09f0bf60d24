/* alloc_bench: a synthetic allocation-heavy workload for benchmarks/run.py.
 *
 * Usage: alloc_bench THREADS TOTAL_OPS [WORK]        (program)
 *        bench_run(threads, total_ops, work or -1)  (built as a shared library with
 *                                                   -DALLOC_BENCH_LIBRARY, for a
 *                                                   Python host under memray)
 * TOTAL_OPS allocations are split evenly across THREADS threads. Each operation
 * picks one of four call paths (from a per-thread xorshift generator, so every run
 * does the same work):
 *   60%  churn_path > churn_alloc     malloc(16..512) and free at once
 *   30%  keep_path > keep_alloc       malloc(16..512) kept in a 4096-slot ring,
 *                                     freed when its slot is reused ("kept a while")
 *   ~10% deep_path (8 frames) > deep_alloc  malloc(16..512), kept in the ring
 *   0.1% big_alloc                    malloc(64 KiB), freed at once
 * Between allocations each operation writes its block and spins WORK steps of the
 * generator (default 200), standing in for the program's real work: about 3 million
 * allocations per second per core unprofiled at -O2 on a 2020s x86_64 core.
 * Each thread's state has cache lines of its own: calloc'd end to end, one thread's
 * generator shared a line with the other's ring position wherever the heap put the
 * array, and the threads' times (profiled or not) followed that layout, not the work.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 4096

struct worker {
  _Alignas(64) pthread_t tid;
  long ops;
  uint64_t rng;
  void *ring[RING];
  unsigned ring_pos;
  uint64_t checksum;
};

static uint64_t next_rand(struct worker *w) {
  uint64_t x = w->rng;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return w->rng = x;
}

static long work_steps = 200;

static size_t small_size(struct worker *w) { return 16 + next_rand(w) % 497; }

static void work(struct worker *w, char *block, size_t size) {
  for (size_t i = 0; i < size; i += 64) block[i] = (char)i;
  uint64_t acc = 0;
  for (long i = 0; i < work_steps; i++) acc += next_rand(w);
  w->checksum += acc & 1;
}

static void keep(struct worker *w, void *p) {
  unsigned slot = w->ring_pos++ % RING;
  free(w->ring[slot]);
  w->ring[slot] = p;
}

__attribute__((noinline)) static void churn_alloc(struct worker *w) {
  size_t size = small_size(w);
  char *p = malloc(size);
  work(w, p, size);
  w->checksum += (uintptr_t)p & 0xff;
  free(p);
}
__attribute__((noinline)) static void churn_path(struct worker *w) { churn_alloc(w); }

__attribute__((noinline)) static void keep_alloc(struct worker *w) {
  size_t size = small_size(w);
  char *p = malloc(size);
  work(w, p, size);
  keep(w, p);
}
__attribute__((noinline)) static void keep_path(struct worker *w) { keep_alloc(w); }

__attribute__((noinline)) static void deep_alloc(struct worker *w) {
  size_t size = small_size(w);
  char *p = malloc(size);
  work(w, p, size);
  keep(w, p);
}
__attribute__((noinline)) static void deep_path(struct worker *w, int depth) {
  if (depth == 0)
    deep_alloc(w);
  else
    deep_path(w, depth - 1);
  __asm__ volatile("" ::: "memory"); /* not a tail call: keep every frame */
}

__attribute__((noinline)) static void big_alloc(struct worker *w) {
  char *p = malloc(64 * 1024);
  work(w, p, 64 * 1024);
  w->checksum += (uintptr_t)p & 0xff;
  free(p);
}

static void *run_worker(void *arg) {
  struct worker *w = arg;
  for (long i = 0; i < w->ops; i++) {
    unsigned r = next_rand(w) % 1000;
    if (r == 0)
      big_alloc(w);
    else if (r < 600)
      churn_path(w);
    else if (r < 900)
      keep_path(w);
    else
      deep_path(w, 8);
  }
  for (unsigned i = 0; i < RING; i++) free(w->ring[i]);
  return NULL;
}

uint64_t bench_run(int threads, long total_ops, long steps) {
  if (steps >= 0) work_steps = steps;
  struct worker *workers = aligned_alloc(_Alignof(struct worker), (size_t)threads * sizeof *workers);
  if (!workers) abort();
  memset(workers, 0, (size_t)threads * sizeof *workers);
  uint64_t checksum = 0;
  for (int t = 0; t < threads; t++) {
    workers[t].ops = total_ops / threads;
    workers[t].rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(t + 1);
  }
  if (threads == 1) {
    run_worker(&workers[0]);
  } else {
    for (int t = 0; t < threads; t++)
      if (pthread_create(&workers[t].tid, NULL, run_worker, &workers[t]) != 0) abort();
    for (int t = 0; t < threads; t++) pthread_join(workers[t].tid, NULL);
  }
  for (int t = 0; t < threads; t++) checksum += workers[t].checksum;
  free(workers);
  return checksum;
}

#ifndef ALLOC_BENCH_LIBRARY
int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: alloc_bench THREADS TOTAL_OPS [WORK]\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  long ops = atol(argv[2]);
  long steps = argc == 4 ? atol(argv[3]) : -1;
  if (threads < 1 || ops < 1) return 2;
  printf("checksum %llu\n", (unsigned long long)bench_run(threads, ops, steps));
  return 0;
}
#endif
