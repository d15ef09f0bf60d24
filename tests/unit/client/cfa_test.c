/* Unit test driver for client/cfa.c (our CFA-rule unwinder), built and run by
 * test_cfa.py with several compiler flags (-O0/-O2, with and without frame
 * pointers). From many places, it walks with hs_cfa_backtrace and with
 * libunwind's unw_backtrace from the same frame, and checks that the pcs
 * are the same (or that ours gave up, where allowed): in a deep recursion
 * (also cut by a short buffer), under alloca (a CFA on rbp without frame
 * pointers), below a frame of 200 KiB, inside qsort's comparator (libc's
 * frames between), in 4 threads at once, and in a signal handler (ours must
 * give up at the signal frame or agree). A second pass runs on the cache
 * filled by the first. With three paths of cfa_lib.c builds (argv), a walk
 * through the first, a dlclose, and a walk through the second (loaded, most
 * likely, where the first was: the same return addresses, other rules) on
 * a walk that looks at the unload count; then the same with a third build
 * whose code and tables sit elsewhere. And code in no object (a JIT's):
 * ours gives up, the second time from its cache. Then every pc of every
 * FDE of this program, libc, libpython (CFA_TEST_LIBPYTHON) and the
 * reloaded objects: its rule through the memo of decoded FDEs equals the
 * one its program gives. Prints one line per failed check and exits
 * non-zero on any failure; with no libunwind it prints SKIP. */
#include <alloca.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cfa.h"
#include "check.h"
#include "state.h"
#include "unwind.h"

typedef int (*bt_fn)(void **, int);
static bt_fn unw_bt;
static void *unw_handle;

#define N 512
static int compared, agreed, gave_up;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

/* Both walks from this frame. Ours starts at the return address into this
 * function, libunwind's one or two entries earlier (its own frame): both
 * are compared from the caller of this function on. */
static __attribute__((noinline)) void compare(const char *where, uint32_t want, int may_give_up) {
  uint64_t ours[N], ref[N];
  int k = hs_cfa_backtrace(ours, want);
  int m = unw_bt((void **)ref, (int)want);
  pthread_mutex_lock(&count_lock);
  compared++;
  if (k < 0) {
    gave_up++;
    pthread_mutex_unlock(&count_lock);
    CHECK(may_give_up, "%s: gave up", where);
    return;
  }
  pthread_mutex_unlock(&count_lock);
  CHECK(k >= 2 && m >= 3, "%s: depth %d / %d", where, k, m);
  if (k < 2 || m < 3)
    return;
  int j = 0;
  while (j < 4 && j < m && ref[j] != ours[1])
    j++;
  CHECK(j < 4 && j < m, "%s: libunwind's stack does not meet ours", where);
  if (j == 4 || j == m)
    return;
  int ok = k - 1 == m - j && memcmp(ours + 1, ref + j, (size_t)(k - 1) * 8) == 0;
  CHECK(ok, "%s: ours %d frames, libunwind's %d", where, k - 1, m - j);
  if (!ok) {
    for (int i = 1; i < k || j + i - 1 < m; i++)
      printf("  %2d %16llx %16llx\n", i, i < k ? (unsigned long long)ours[i] : 0ull,
             j + i - 1 < m ? (unsigned long long)ref[j + i - 1] : 0ull);
    return;
  }
  pthread_mutex_lock(&count_lock);
  agreed++;
  pthread_mutex_unlock(&count_lock);
}

static volatile int sink;

static __attribute__((noinline)) int recurse(int depth, uint32_t want) {
  if (depth == 0) {
    compare("recursion", want, 0);
    return 1;
  }
  int r = recurse(depth - 1, want) + (depth & 3);
  sink = r;
  return r;
}

static __attribute__((noinline)) void with_alloca(size_t n) {
  char *p = alloca(n);
  memset(p, 1, n);
  sink = p[n / 2];
  compare("alloca", N, 0);
  sink = p[n - 1];
}

static __attribute__((noinline)) void big_frame(void) {
  volatile char buf[200 * 1024];
  buf[0] = 1;
  buf[sizeof buf - 1] = 2;
  compare("big frame", N, 0);
  sink = buf[0] + buf[sizeof buf - 1];
}

static int cmp_calls;
static int cmp_int(const void *a, const void *b) {
  if (cmp_calls++ < 4)
    compare("qsort", N, 0);
  return *(const int *)a - *(const int *)b;
}

static void in_qsort(void) {
  int v[64];
  for (int i = 0; i < 64; i++)
    v[i] = (int)(rnd() % 1000);
  qsort(v, 64, sizeof v[0], cmp_int);
}

static void on_signal(int sig) {
  (void)sig;
  compare("signal handler", N, 1);
}

static __attribute__((noinline)) void in_signal(void) {
  signal(SIGUSR1, on_signal);
  raise(SIGUSR1);
  sink = 0;
}

static void *thread_main(void *arg) {
  (void)arg;
  for (int i = 0; i < 50; i++)
    recurse(10 + i % 7, N);
  with_alloca(100);
  return NULL;
}

static void all(void) {
  recurse(0, N);
  recurse(5, N);
  recurse(300, N);
  recurse(300, 64); /* cut: both stop at 64 */
  with_alloca(40);
  with_alloca(5000);
  big_frame();
  cmp_calls = 0;
  in_qsort();
  in_signal();
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, thread_main, NULL);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
}

/* Code in no object (as a JIT writes it): ours must give up there, and
 * the second time without a miss (the "give up" is cached). */
static void in_jit(void) {
  compare("jit code", N, 1);
}

static void jit_check(void) {
  /* sub $8, %rsp; call *%rdi; add $8, %rsp; ret */
  static const uint8_t code[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7, 0x48, 0x83, 0xc4, 0x08, 0xc3};
  void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED)
    return;
  memcpy(page, code, sizeof code);
  if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) {
    printf("no executable mapping: jit check skipped\n");
    munmap(page, 4096);
    return;
  }
  void (*jit)(void (*)(void)) = (void (*)(void (*)(void)))page;
  int before = gave_up;
  jit(in_jit); /* its misses may clear the cache (the dlclose above) */
  jit(in_jit);
  struct hs_cfa_stats st1, st2;
  hs_cfa_stats(&st1);
  jit(in_jit);
  hs_cfa_stats(&st2);
  CHECK(gave_up == before + 3, "jit code: gave up %d of 3 times", gave_up - before);
  CHECK(st2.misses == st1.misses, "jit code: %llu misses the second time",
        (unsigned long long)(st2.misses - st1.misses));
  munmap(page, 4096);
}

/* Every pc of every FDE of the object that holds addr: its rule through the
 * memo of decoded FDEs equals the one its program gives when run up to it
 * (cfa.c's hs_cfa_selftest). */
static void memo_check(const char *what, const void *addr) {
  struct hs_cfa_selftest st;
  hs_cfa_selftest((uintptr_t)addr, &st);
  printf("memo check, %s: %llu FDEs (%llu kept), %llu pcs, %llu differ (rules %016llx)\n", what,
         (unsigned long long)st.fdes, (unsigned long long)st.kept, (unsigned long long)st.pcs,
         (unsigned long long)st.differ, (unsigned long long)st.rules_hash);
  CHECK(st.fdes > 0 && st.kept > 0, "%s: no FDE through the memo", what);
  /* An FDE is left out only for what run refuses, or for a program longer
   * than the whole memo: not one in ten here. (A memo exactly full once
   * kept nothing more until the next unload, which this caught.) */
  CHECK(st.kept * 10 >= st.fdes * 9, "%s: only %llu of %llu FDEs kept in the memo", what,
        (unsigned long long)st.kept, (unsigned long long)st.fdes);
  CHECK(st.differ == 0, "%s: %llu pcs with another rule, the first at pc - 1 = %llx", what,
        (unsigned long long)st.differ, (unsigned long long)st.first_differ[0]);
}

static void through_lib(void) {
  compare("unloaded and reloaded object", N, 0);
}

typedef int (*lib_call_fn)(void (*)(void));

static void *reloaded_thread(void *arg) {
  hs_thread_state.unwinds = 1; /* a walk that checks for unloads (cfa.c) */
  ((lib_call_fn)arg)(through_lib);
  return NULL;
}

/* A flushed libunwind, and a walk through the object in a new thread (see
 * unload_check). */
static void walk_reloaded(lib_call_fn call) {
  typedef void (*flush_fn)(void *as, uintptr_t lo, uintptr_t hi);
  flush_fn flush = (flush_fn)dlsym(unw_handle, "_Ux86_64_flush_cache");
  void **as = (void **)dlsym(unw_handle, "_ULx86_64_local_addr_space");
  CHECK(flush && as, "no unw_flush_cache");
  if (flush && as)
    flush(*as, 0, 0);
  pthread_t th;
  pthread_create(&th, NULL, reloaded_thread, (void *)call);
  pthread_join(th, NULL);
}

static void *base_of(const void *fn) {
  Dl_info info;
  return dladdr(fn, &info) ? info.dli_fbase : NULL;
}

static void unload_check(const char *first, const char *second, const char *third) {
  void *h = dlopen(first, RTLD_NOW | RTLD_LOCAL);
  lib_call_fn call = h ? (lib_call_fn)dlsym(h, "cfa_lib_call") : NULL;
  CHECK(call != NULL, "cannot load %s", first);
  if (!call)
    return;
  for (int i = 0; i < 3; i++)
    call(through_lib);
  uintptr_t was = (uintptr_t)call;
  dlclose(h);
  h = dlopen(second, RTLD_NOW | RTLD_LOCAL);
  call = h ? (lib_call_fn)dlsym(h, "cfa_lib_call") : NULL;
  CHECK(call != NULL, "cannot load %s", second);
  if (!call)
    return;
  printf("reloaded at the same address: %s\n", (uintptr_t)call == was ? "yes" : "no");
  struct hs_cfa_stats before, after;
  hs_cfa_stats(&before);
  /* libunwind keeps what it learnt of the first object (its register-state
   * cache until unw_flush_cache; its trace cache, per thread, for good:
   * src/x86_64/Gtrace.c), so the reference is a flushed libunwind in a new
   * thread. */
  walk_reloaded(call);
  /* The walks through the first object left its FDEs' rows in the memo, at
   * the same FDE addresses as the second's: the walk after the reload
   * looked there first, and agrees with libunwind only because the unload
   * emptied the memo (without that, the walk gives up on a stale rule and
   * memo_check below finds 34 pcs with the first object's rules). It kept
   * the second object's rows. */
  hs_cfa_stats(&after);
  CHECK(after.memo_fills > before.memo_fills, "reloaded object: nothing kept in the memo");
  memo_check("reloaded object", (const void *)call);
  /* The third build, its functions elsewhere and one FDE more, most likely
   * at the same base (so the same dlpi_addr and dlpi_phdr): the walk must
   * not use the table that cfa.c kept for the second (the unload empties
   * it; without that, the last FDE is out of the kept count and the walk
   * gives up). */
  void *base = base_of((const void *)call);
  dlclose(h);
  h = dlopen(third, RTLD_NOW | RTLD_LOCAL);
  call = h ? (lib_call_fn)dlsym(h, "cfa_lib_call") : NULL;
  CHECK(call != NULL, "cannot load %s", third);
  if (!call)
    return;
  printf("other layout at the same base: %s\n", base_of((const void *)call) == base ? "yes" : "no");
  walk_reloaded(call);
  memo_check("object of another layout", (const void *)call);
  dlclose(h);
}

int main(int argc, char **argv) {
  void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  unw_handle = h;
  unw_bt = h ? (bt_fn)dlsym(h, "unw_backtrace") : NULL;
  if (!unw_bt) {
    printf("SKIP no libunwind\n");
    return 0;
  }
  CHECK(hs_cfa_init() == 0, "init");
  all(); /* cold cache */
  all(); /* warm */
  if (argc == 4)
    unload_check(argv[1], argv[2], argv[3]);
  jit_check();
  memo_check("this program", (const void *)recurse);
  memo_check("libc", (const void *)qsort);
  /* CFA_TEST_LIBPYTHON: a libpython to look at too (loaded, not started). */
  const char *py = getenv("CFA_TEST_LIBPYTHON");
  void *pyh = py && *py ? dlopen(py, RTLD_LAZY | RTLD_LOCAL) : NULL;
  void *py_fn = pyh ? dlsym(pyh, "PyEval_EvalCode") : NULL;
  CHECK(!py || !*py || py_fn, "cannot load %s", py);
  if (py_fn)
    memo_check("libpython", py_fn);
  struct hs_cfa_stats st;
  hs_cfa_stats(&st);
  printf("compared %d agreed %d gave_up %d misses %llu (from the memo %llu, FDEs kept %llu, "
         "not kept %llu, memo emptied %llu times)\n", compared, agreed, gave_up,
         (unsigned long long)st.misses, (unsigned long long)st.memo_hits,
         (unsigned long long)st.memo_fills, (unsigned long long)st.memo_fails,
         (unsigned long long)st.memo_drops);
  /* Only the signal handler (once per pass) and the jit code (3 times) may
   * give up. */
  CHECK(gave_up <= 5, "gave up %d times", gave_up);
  CHECK(agreed + gave_up == compared, "%d compared, %d agreed", compared, agreed);
  return check_status();
}
