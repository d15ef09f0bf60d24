/*
 * labelfirst.c: threads whose first label push comes while the header
 * (include/heapscope.h) is still looking for the client for the first time, as
 * a server's workers do when they start together. THREADS threads, released at
 * once by a barrier, each push tenant=t<N> and keep one block of SIZE * (N + 1)
 * bytes under it (in allocate), then pop. The header's dlsym is this file's
 * held_dlsym: the first lookup is held until every other thread's push has
 * returned, so that those pushes meet the lookup under way in every run, not
 * one run in thirty. --print-truth: `tenant t<N> alloc unreleased` per thread
 * and the truth lines. A run prints the pushes' return values (0: applied).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *held_dlsym(void *handle, const char *name);
#define dlsym held_dlsym
#if defined(__has_include)
#if __has_include(<heapscope.h>)
#include <heapscope.h>
#else
#include "../../src/heapscope/include/heapscope.h"
#endif
#else
#include "../../src/heapscope/include/heapscope.h"
#endif
#undef dlsym

#include "truth.h"

#define THREADS 8
#define SIZE 1000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pushed_cond = PTHREAD_COND_INITIALIZER;
static int held_once; /* the first lookup was held */
static int pushed;    /* threads whose push returned */
static pthread_barrier_t start;
static int results[THREADS];

/* The first call waits until the other THREADS - 1 threads pushed (at most 20 s: a
 * bound, never the synchronisation), the later ones go straight through. */
static void *held_dlsym(void *handle, const char *name) {
  pthread_mutex_lock(&lock);
  if (!held_once) {
    held_once = 1;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    while (pushed < THREADS - 1 && pthread_cond_timedwait(&pushed_cond, &lock, &until) == 0) {
    }
  }
  pthread_mutex_unlock(&lock);
  return dlsym(handle, name);
}

__attribute__((noinline)) static void allocate(int n) {
  truth_sink = malloc((size_t)SIZE * (size_t)(n + 1)); /* kept: unreleased */
}

static void *worker(void *arg) {
  int n = (int)(long)arg;
  char tenant[8];
  snprintf(tenant, sizeof tenant, "t%d", n);
  pthread_barrier_wait(&start);
  results[n] = heapscope_label_push("tenant", tenant);
  pthread_mutex_lock(&lock);
  pushed++;
  pthread_cond_broadcast(&pushed_cond);
  pthread_mutex_unlock(&lock);
  allocate(n);
  heapscope_label_pop();
  return NULL;
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    long all = 0;
    for (int n = 0; n < THREADS; n++) {
      printf("tenant t%d %d %d\n", n, SIZE * (n + 1), SIZE * (n + 1));
      all += SIZE * (n + 1);
    }
    truth_line("allocate", all, THREADS, all, THREADS);
    return 0;
  }
  pthread_t th[THREADS];
  pthread_barrier_init(&start, NULL, THREADS);
  for (long n = 0; n < THREADS; n++)
    pthread_create(&th[n], NULL, worker, (void *)n);
  for (int n = 0; n < THREADS; n++)
    pthread_join(th[n], NULL);
  printf("pushes");
  for (int n = 0; n < THREADS; n++)
    printf(" %d", results[n]);
  printf("\n");
  return 0;
}
