/*
 * labelled.c: a server-like loop that labels each "request" with its tenant
 * (include/heapscope.h, heapscope_label_push/pop) on four threads, with
 * known sizes: every request of tenant T allocates SIZE[T] bytes in
 * handle_request and keeps one block of KEEP[T] bytes (never freed); a
 * nested push adds route=/r<n> or /products/r<n>. --print-truth prints per tenant and per
 * route: allocated bytes, unreleased bytes; and the usual truth lines. `labelled sets N` pushes N distinct tenant
 * values, one allocation each, to pass the client's cap of label sets.
 * `labelled api` prints what refused pushes return and allocates under a
 * stack 16 levels deep (see there).
 */
#if defined(__has_include)
#if __has_include(<heapscope.h>)
#include <heapscope.h>
#else
#include "../../src/heapscope/include/heapscope.h"
#endif
#else
#include "../../src/heapscope/include/heapscope.h"
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENANTS 3
#define REQUESTS 200
#define THREADS 4
static const char *NAMES[TENANTS] = {"acme", "globex", "initech"};
static const size_t SIZE[TENANTS] = {1000, 3000, 7000};
static const size_t KEEP[TENANTS] = {64, 128, 512};

static void *volatile sink;

/* Routes /r0, /r1 and two longer than a word, /products/r2 and /r3, that differ only past
 * their 8th byte: written into one buffer, each must be seen as itself. */
#define ROUTES 4
static void route_name(char *out, size_t size, int r) {
  snprintf(out, size, r < 2 ? "/r%d" : "/products/r%d", r);
}

__attribute__((noinline)) static void handle_request(int tenant, int n) {
  char route[32];
  route_name(route, sizeof route, n % ROUTES);
  heapscope_label_push("route", route);
  char *p = malloc(SIZE[tenant]);
  memset(p, 1, SIZE[tenant]);
  sink = p;
  free(p);
  sink = malloc(KEEP[tenant]); /* kept: unreleased */
  heapscope_label_pop();
}

static void *worker(void *arg) {
  int t = (int)(long)arg;
  for (int i = 0; i < REQUESTS; i++) {
    int tenant = (i + t) % TENANTS;
    heapscope_label_push("tenant", NAMES[tenant]);
    handle_request(tenant, i);
    heapscope_label_pop();
  }
  sink = malloc(100); /* unlabelled */
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--print-truth") == 0) {
    long count[TENANTS] = {0};
    for (int t = 0; t < THREADS; t++)
      for (int i = 0; i < REQUESTS; i++)
        count[(i + t) % TENANTS]++;
    long all = 0, kept = 0;
    for (int k = 0; k < TENANTS; k++) {
      printf("tenant %s %ld %ld\n", NAMES[k], count[k] * (long)(SIZE[k] + KEEP[k]), count[k] * (long)KEEP[k]);
      all += count[k] * (long)(SIZE[k] + KEEP[k]);
      kept += count[k] * (long)KEEP[k];
    }
    /* truth FUNCTION alloc_space alloc_objects space objects, as the other programs'. */
    printf("truth handle_request %ld %d %ld %d\n", all, 2 * THREADS * REQUESTS, kept, THREADS * REQUESTS);
    printf("truth worker %d %d %d %d\n", 100 * THREADS, THREADS, 100 * THREADS, THREADS);
    /* The route is written into one stack buffer for every request: the same pointer, its
     * value changing, which the client must never take for the previous one. */
    long route[ROUTES][2] = {{0, 0}};
    for (int t = 0; t < THREADS; t++)
      for (int i = 0; i < REQUESTS; i++) {
        int k = (i + t) % TENANTS;
        route[i % ROUTES][0] += (long)(SIZE[k] + KEEP[k]);
        route[i % ROUTES][1] += (long)KEEP[k];
      }
    for (int r = 0; r < ROUTES; r++) {
      char name[32];
      route_name(name, sizeof name, r);
      printf("route %s %ld %ld\n", name, route[r][0], route[r][1]);
    }
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "api") == 0) {
    /* The push's answers: 0 applied, -1 not (a level all the same). Prints them, then
     * allocates 4000 bytes under tenant=deep only if the 16 levels and the refused pushes
     * left the stack where it should be. */
    int bad_key = heapscope_label_push("bad key", "x");
    int too_long = heapscope_label_push("tenant", "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv");
    heapscope_label_pop();
    heapscope_label_pop();
    int ok = heapscope_label_push("tenant", "deep");
    int deepest = 0;
    for (int i = 1; i < 16; i++)
      deepest = heapscope_label_push("level", "x");
    int past = heapscope_label_push("level", "past");
    for (int i = 0; i < 16; i++)
      heapscope_label_pop();
    sink = malloc(4000); /* tenant=deep only */
    heapscope_label_pop();
    sink = malloc(5000); /* no labels */
    printf("bad_key %d too_long %d ok %d deepest %d past %d\n", bad_key, too_long, ok, deepest, past);
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "sets") == 0) {
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
      char v[32];
      snprintf(v, sizeof v, "t%d", i);
      heapscope_label_push("tenant", v);
      sink = malloc(256);
      heapscope_label_pop();
    }
    return 0;
  }
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++)
    pthread_create(&th[t], NULL, worker, (void *)t);
  for (int t = 0; t < THREADS; t++)
    pthread_join(th[t], NULL);
  return 0;
}
