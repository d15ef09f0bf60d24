/* unwind_mix: allocations from places an unwinder finds hard, for
 * test_unwind_verify.py, which builds it at -O0 and -O2, with and without
 * frame pointers, and runs it with HEAPSCOPE_UNWIND_VERIFY=1 (the client's
 * own CFA walk checked against libunwind on every sample): C++ exceptions
 * (the exception object is malloc'ed inside the throw, destructors allocate
 * in landing pads as the exception passes, the catch allocates), containers with
 * inlined frames at -O2, a recursion deeper than the kept stack, qsort's
 * comparator (libc frames between), a signal handler (a signal frame: the
 * walk gives up there), and 4 threads at once. Prints "ok" and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

static volatile long sink;

/* Its destructor allocates while an exception passes: in a landing pad. */
struct Guard {
  ~Guard() {
    std::string s(60, 'y');
    sink += (long)s.size();
  }
};

__attribute__((noinline)) static void thrower(int depth) {
  Guard g;
  if (depth == 0)
    throw std::runtime_error(std::string(100, 'x'));
  std::vector<int> v(depth + 10);
  sink += (long)v.size();
  thrower(depth - 1);
}

static void exceptions(int rounds) {
  for (int i = 0; i < rounds; i++) {
    try {
      thrower(i % 9);
    } catch (const std::exception &e) {
      std::string copy = std::string(e.what()) + std::to_string(i);
      sink += (long)copy.size();
    }
  }
}

static void containers(int rounds) {
  std::map<int, std::string> m;
  for (int i = 0; i < rounds; i++) {
    m[i % 97] = std::string(40 + i % 30, 'a');
    std::vector<std::string> v;
    for (int j = 0; j < 5; j++)
      v.push_back(std::to_string(i * j) + "........................................");
    sink += (long)v.size();
  }
}

__attribute__((noinline)) static long recurse(int depth) {
  if (depth == 0) {
    char *p = (char *)malloc(256);
    memset(p, 0, 256);
    long r = p[3];
    free(p);
    return r;
  }
  long r = recurse(depth - 1) + depth;
  sink = r;
  return r;
}

static int cmp(const void *a, const void *b) {
  void *p = malloc(64);
  sink += (long)(p != NULL);
  free(p);
  return *(const int *)a - *(const int *)b;
}

static void sorting(void) {
  int v[200];
  for (int i = 0; i < 200; i++)
    v[i] = (i * 7919) % 200;
  qsort(v, 200, sizeof v[0], cmp);
}

static void on_signal(int sig) {
  (void)sig;
  void *p = malloc(4096); /* raised synchronously below: not inside malloc */
  sink += (long)(p != NULL);
  free(p);
}

static void *work(void *arg) {
  (void)arg;
  exceptions(300);
  containers(2000);
  for (int i = 0; i < 50; i++)
    recurse(i % 3 == 0 ? 300 : 20);
  sorting();
  return NULL;
}

int main() {
  signal(SIGUSR1, on_signal);
  for (int i = 0; i < 20; i++)
    raise(SIGUSR1);
  work(NULL);
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, work, NULL);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  puts("ok");
  return 0;
}
