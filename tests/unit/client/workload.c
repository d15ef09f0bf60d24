/* Target program for test_client.py: 4 threads run malloc/free, calloc,
 * realloc, reallocarray, "operator new"-style wrapper and aligned loops with
 * sizes the test can recognize (the ranges 20000..29999 are used by nothing
 * else in the process). Prints a fixed line; exit status 0. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#ifndef ITERS
#define ITERS 300
#endif

/* Like operator new: a function of its own between the caller and malloc. */
__attribute__((noinline)) static void *xnew(size_t n) {
  void *p = malloc(n);
  if (!p)
    abort();
  return p;
}

/* Keeps the compiler from eliding a malloc/free pair it can see through. */
static void *volatile sink;
__attribute__((noinline)) static void *use(void *p) {
  sink = p;
  return p;
}

__attribute__((noinline)) static void *worker(void *arg) {
  long t = (long)arg;
  unsigned long sum = 0;
  for (int i = 0; i < ITERS; i++) {
    size_t k = (size_t)(t * ITERS + i); /* unique per thread and iteration */
    char *a = use(malloc(20000 + k % 1000));
    char *b = use(calloc(2, 10500 + k % 500));           /* 21000 + 2 * (k % 500) */
    char *c = malloc(22000 + k % 1000);
    c = use(realloc(use(c), 23000 + k % 1000));
    char *d = use(xnew(24000 + k % 1000));
    char *e = use(reallocarray(NULL, 5, 5000 + k % 200)); /* 25000 + 5 * (k % 200) */
    memset(a, 1, 10);
    sum += (unsigned long)b[5] + (unsigned long)c[0] * 0 + (unsigned long)d[0] * 0;
    free(e);
    free(d);
    free(c);
    free(b);
    free(a);
  }
  void *p = NULL;
  if (posix_memalign(&p, 64, 26000 + t) == 0)
    free(use(p));
  free(use(aligned_alloc(128, 26112 + (size_t)t * 128)));
  free(use(memalign(256, 26200 + t)));
  free(use(valloc(26300 + t)));
  return (void *)sum;
}

int main(void) {
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++)
    pthread_create(&th[t], NULL, worker, (void *)t);
  unsigned long total = 0;
  for (int t = 0; t < THREADS; t++) {
    void *r;
    pthread_join(th[t], &r);
    total += (unsigned long)r;
  }
  printf("workload done %d %lu\n", ITERS, total);
  return 0;
}
