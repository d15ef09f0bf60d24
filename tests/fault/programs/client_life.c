/* client_life: what programs do to their own life and memory, under the
 * profiler. One mode per run (argv[1]); every mode prints what it saw, and
 * the exit status is the mode's own. Ground truth at -i 1, per function
 * (alloc_space, alloc_objects, space, objects):
 *
 *   family         fam_malloc 1001,1,1001,1   fam_calloc 1020,1,1020,1
 *                  fam_realloc 3006,2,2003,1  fam_reallocarray 1043,1,1043,1
 *                  fam_posix_memalign 1005,1,1005,1  fam_aligned_alloc 1024,1,1024,1
 *                  fam_memalign 1007,1,1007,1  fam_valloc 1008,1,1008,1
 *                  fam_pvalloc PAGE,1,PAGE,1 (pvalloc rounds 1009 up to the page)
 *                  fam_freed 5050,5,0,0
 *   family-jemalloc  the same without fam_pvalloc
 *   fork           the parent's life_parent 250000,50,0,0 (the child is not profiled)
 *   vfork|spawn    the exec'd child's life_exec_child 120000,20,0,0
 *   chain N        life_chain 70000,10,0,0 in each of the N+1 images
 *   dlopen         life_dlopen 400000,50,0,0 (through a library opened and
 *                  closed 50 times: argv[2] is its path)
 *   threads        life_thread 2700000,3000,0,0 (300 threads x 10 x 900)
 *   atexit         life_atexit 11000,10,11000,10; life_dtor 12000,10,12000,10
 *   oom            no ground truth: malloc returns NULL under RLIMIT_AS
 *   sigkill|sigsegv|abort   life_before_death 13000,10,13000,10, then death
 *   sigmalloc      on_usr2: 150 to 300 x 770 bytes, all freed (a handler that
 *                  mallocs; the odd signals interrupt a loop of malloc/free,
 *                  and when they interrupt the client itself the handler's
 *                  allocation passes through unsampled; the even ones
 *                  interrupt a spin with no malloc in it, so are all sampled)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define NOINLINE __attribute__((noinline))

static NOINLINE void *fam_malloc(void) { return malloc(1001); }
static NOINLINE void *fam_calloc(void) { return calloc(10, 102); }
static NOINLINE void *fam_realloc(void) { return realloc(realloc(NULL, 1003), 2003); }
static NOINLINE void *fam_reallocarray(void) { return reallocarray(NULL, 7, 149); }
static NOINLINE void *fam_posix_memalign(void) {
  void *p = NULL;
  return posix_memalign(&p, 64, 1005) == 0 ? p : NULL;
}
static NOINLINE void *fam_aligned_alloc(void) { return aligned_alloc(64, 1024); }
static NOINLINE void *fam_memalign(void) { return memalign(128, 1007); }
static NOINLINE void *fam_valloc(void) { return valloc(1008); }
static NOINLINE void *fam_pvalloc(void) { return pvalloc(1009); }
static NOINLINE void fam_freed(void) {
  for (int i = 0; i < 5; i++)
    free(malloc(1010));
}

/* with_pvalloc = 0 under jemalloc, which has no pvalloc: glibc's would
 * serve it, and jemalloc's malloc_usable_size crash on its pointer. */
static int family(int with_pvalloc) {
  static const size_t want[] = {1001, 1020, 2003, 1043, 1005, 1024, 1007, 1008, 1009};
  int n = with_pvalloc ? 9 : 8;
  void *p[9] = {fam_malloc(), fam_calloc(), fam_realloc(), fam_reallocarray(),
                fam_posix_memalign(), fam_aligned_alloc(), fam_memalign(), fam_valloc(),
                with_pvalloc ? fam_pvalloc() : NULL};
  fam_freed();
  int ok = 0;
  for (int i = 0; i < n; i++)
    ok += p[i] != NULL && malloc_usable_size(p[i]) >= want[i];
  printf("family: %d of %d allocations usable\n", ok, n);
  return ok == n ? 0 : 1;
}

static volatile int stop_threads;

static void *churn(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&stop_threads, __ATOMIC_RELAXED))
    free(malloc(64));
  return NULL;
}

static NOINLINE void life_parent(void) {
  for (int i = 0; i < 50; i++)
    free(malloc(5000));
}

static NOINLINE void life_child(void) {
  for (int i = 0; i < 100; i++)
    free(malloc(3000));
}

static int fork_threads(void) {
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, churn, NULL);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    life_child();
    _exit(7);
  }
  life_parent();
  int status = 0;
  waitpid(pid, &status, 0);
  __atomic_store_n(&stop_threads, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  printf("fork: child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

static NOINLINE void life_exec_child(void) {
  for (int i = 0; i < 20; i++)
    free(malloc(6000));
}

static int run_child(const char *how, const char *self) {
  char *argv[] = {(char *)self, "exec-child", NULL};
  int status = 0;
  fflush(stdout);
  if (strcmp(how, "vfork") == 0) {
    pid_t pid = vfork();
    if (pid == 0) {
      execve(self, argv, environ);
      _exit(127);
    }
    waitpid(pid, &status, 0);
  } else {
    pid_t pid;
    if (posix_spawn(&pid, self, NULL, NULL, argv, environ) != 0)
      return 1;
    waitpid(pid, &status, 0);
  }
  printf("%s: child exited %d\n", how, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

static NOINLINE void life_chain(void) {
  for (int i = 0; i < 10; i++)
    free(malloc(7000));
}

static int chain(const char *self, int n) {
  life_chain();
  printf("chain %d\n", n);
  fflush(stdout);
  if (n == 0)
    return 0;
  char next[16];
  snprintf(next, sizeof next, "%d", n - 1);
  char *argv[] = {(char *)self, "chain", next, NULL};
  execve(self, argv, environ);
  return 127;
}

static NOINLINE void *life_dlopen(void *(*fn)(size_t)) { return fn(8000); }

static int dlopen_loop(const char *lib) {
  int ok = 0;
  for (int i = 0; i < 50; i++) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h)
      break;
    void *(*fn)(size_t) = (void *(*)(size_t))dlsym(h, "plugin_alloc");
    if (fn) {
      free(life_dlopen(fn));
      ok++;
    }
    dlclose(h);
  }
  printf("dlopen: %d rounds\n", ok);
  return ok == 50 ? 0 : 1;
}

static NOINLINE void life_thread_alloc(void) {
  for (int i = 0; i < 10; i++)
    free(malloc(900));
}

static NOINLINE void *life_thread(void *arg) {
  (void)arg;
  life_thread_alloc();
  return NULL;
}

static int thread_storm(void) {
  int made = 0;
  for (int batch = 0; batch < 6; batch++) {
    pthread_t th[50];
    for (int i = 0; i < 50; i++)
      made += pthread_create(&th[i], NULL, life_thread, NULL) == 0;
    for (int i = 0; i < 50; i++)
      pthread_join(th[i], NULL);
  }
  printf("threads: %d\n", made);
  return made == 300 ? 0 : 1;
}

static void *kept[20];

static NOINLINE void life_atexit(void) {
  for (int i = 0; i < 10; i++)
    kept[i] = malloc(1100);
}

static int atexit_armed;

static NOINLINE void life_dtor(void) {
  for (int i = 0; i < 10; i++)
    kept[10 + i] = malloc(1200);
}

__attribute__((destructor)) static void static_destructor(void) {
  if (atexit_armed)
    life_dtor();
}

static int at_exit(void) {
  atexit_armed = 1;
  atexit(life_atexit);
  printf("atexit: armed\n");
  return 0;
}

static int oom(void) {
  struct rlimit rl = {512u << 20, 512u << 20};
  if (setrlimit(RLIMIT_AS, &rl) != 0)
    return 3;
  void *blocks[128];
  int n = 0, null_seen = 0, enomem = 0;
  while (n < 128) {
    errno = 0;
    void *p = malloc(16u << 20);
    if (!p) {
      null_seen = 1;
      enomem = errno == ENOMEM;
      break;
    }
    blocks[n++] = p;
  }
  for (int i = 0; i < n; i++)
    free(blocks[i]);
  void *after = malloc(1000);
  printf("oom: NULL %s, errno %s, malloc after %s\n", null_seen ? "seen" : "never",
         enomem ? "ENOMEM" : "other", after ? "works" : "fails");
  free(after);
  return 0;
}

static NOINLINE void life_before_death(void) {
  for (int i = 0; i < 10; i++)
    kept[i] = malloc(1300);
}

static int die(const char *how) {
  life_before_death();
  printf("dying of %s\n", how);
  fflush(stdout);
  if (strcmp(how, "sigkill") == 0)
    raise(SIGKILL);
  if (strcmp(how, "sigsegv") == 0) {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  }
  abort();
}

static volatile int usr2_count;

static NOINLINE void on_usr2(int sig) {
  (void)sig;
  free(malloc(770));
  __atomic_fetch_add(&usr2_count, 1, __ATOMIC_RELEASE);
}

struct kicker {
  pthread_t target;
};

/* Even signals are sent only once the main thread has said it is spinning
 * outside malloc (quiet == 2), so at least 150 handler allocations cannot
 * land inside the client: the lower bound is exact, not a matter of luck. */
static volatile int quiet;

static void *kick(void *arg) {
  struct kicker *k = arg;
  for (int i = 0; i < 300; i++) {
    if (i % 2 == 0) {
      __atomic_store_n(&quiet, 1, __ATOMIC_RELEASE);
      while (__atomic_load_n(&quiet, __ATOMIC_ACQUIRE) != 2)
        sched_yield();
    }
    pthread_kill(k->target, SIGUSR2);
    /* Wait for this one to be handled before the next: no signal merges. */
    while (__atomic_load_n(&usr2_count, __ATOMIC_ACQUIRE) <= i)
      sched_yield();
    __atomic_store_n(&quiet, 0, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&stop_threads, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int sigmalloc(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr2;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);
  struct kicker k = {pthread_self()};
  pthread_t th;
  pthread_create(&th, NULL, kick, &k);
  long loops = 0;
  while (!__atomic_load_n(&stop_threads, __ATOMIC_ACQUIRE)) {
    if (__atomic_load_n(&quiet, __ATOMIC_ACQUIRE) == 1) {
      __atomic_store_n(&quiet, 2, __ATOMIC_RELEASE);
      while (__atomic_load_n(&quiet, __ATOMIC_ACQUIRE) == 2)
        ; /* the signal arrives here, outside malloc */
      continue;
    }
    free(malloc(32));
    loops++;
  }
  pthread_join(th, NULL);
  printf("sigmalloc: %d signals handled\n", usr2_count);
  return loops > 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: client_life MODE [ARG]\n");
    return 2;
  }
  const char *m = argv[1];
  if (strcmp(m, "family") == 0)
    return family(1);
  if (strcmp(m, "family-jemalloc") == 0)
    return family(0);
  if (strcmp(m, "fork") == 0)
    return fork_threads();
  if (strcmp(m, "vfork") == 0 || strcmp(m, "spawn") == 0)
    return run_child(m, argv[0]);
  if (strcmp(m, "exec-child") == 0) {
    life_exec_child();
    printf("exec-child ran\n");
    return 5;
  }
  if (strcmp(m, "chain") == 0 && argc == 3)
    return chain(argv[0], atoi(argv[2]));
  if (strcmp(m, "dlopen") == 0 && argc == 3)
    return dlopen_loop(argv[2]);
  if (strcmp(m, "threads") == 0)
    return thread_storm();
  if (strcmp(m, "atexit") == 0)
    return at_exit();
  if (strcmp(m, "oom") == 0)
    return oom();
  if (strcmp(m, "sigkill") == 0 || strcmp(m, "sigsegv") == 0 || strcmp(m, "abort") == 0)
    return die(m);
  if (strcmp(m, "sigmalloc") == 0)
    return sigmalloc();
  fprintf(stderr, "unknown mode %s\n", m);
  return 2;
}
