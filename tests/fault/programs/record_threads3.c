/* record_threads3.c: three threads that allocate and free without pause, the
 * main thread among them (the thread gdb stops first), for attach tests: an
 * attach that runs dlopen on a thread stopped inside malloc hangs it for good.
 * A fourth thread reads the commands.
 *
 * Prints "ready <pid>" once the threads run. On stdin:
 *   c   wait until every thread has done more rounds, print "ok c": all alive
 *   q   exit 0
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 3

static unsigned long rounds[THREADS];

static void *worker(void *arg) {
  long id = (long)arg;
  void *slots[64] = {0};
  for (unsigned long i = 0;; i++) {
    int k = (int)(i % 64);
    free(slots[k]);
    slots[k] = malloc(16 + (i * 37) % 4000);
    if (k == 0) __atomic_add_fetch(&rounds[id], 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

static void *control(void *arg) {
  (void)arg;
  printf("ready %d\n", (int)getpid());
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (line[0] == 'q') exit(0);
    if (line[0] == 'c') {
      unsigned long seen[THREADS];
      for (int i = 0; i < THREADS; i++) seen[i] = __atomic_load_n(&rounds[i], __ATOMIC_RELAXED);
      for (int i = 0; i < THREADS; i++)
        while (__atomic_load_n(&rounds[i], __ATOMIC_RELAXED) <= seen[i] + 2) usleep(100);
      printf("ok c\n");
    }
  }
  exit(0);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  pthread_t t[THREADS];
  for (long i = 1; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  pthread_create(&t[0], NULL, control, NULL);
  worker((void *)0);
  return 0;
}
