/* unwind.c: see unwind.h. */
#include "unwind.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wire.h"

/* Exported by ld.so: the stack pointer at process start, i.e. just above
 * every frame of the main thread. */
extern void *__libc_stack_end;

typedef int (*unw_backtrace_fn)(void **buffer, int size);

static uint32_t active = HS_UNWINDER_FP;
static unw_backtrace_fn unw_backtrace_p;
static uintptr_t own_start, own_end; /* our executable segment */
static pthread_t main_thread;
static int have_main_thread;

/* Room for our own leading frames on top of max_frames. */
#define OWN_FRAMES_SLACK 16

static int find_own_text(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  uintptr_t me = (uintptr_t)data;
  const ElfW(Phdr) *text = NULL;
  int mine = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD)
      continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (me >= lo && me < lo + ph->p_memsz)
      mine = 1;
    if ((ph->p_flags & PF_X) && !text)
      text = ph;
  }
  if (!mine || !text)
    return 0;
  own_start = info->dlpi_addr + text->p_vaddr;
  own_end = own_start + text->p_memsz;
  return 1;
}

/* The top of the current thread's stack, exclusive. Main thread: glibc's
 * __libc_stack_end. Other threads: glibc places its struct pthread (the
 * thread control block) at the top of the thread's stack mapping, right
 * above the frames, so pthread_self() bounds them without a call to
 * pthread_getattr_np (which allocates and reads /proc). */
static uintptr_t stack_top(void) {
  pthread_t self = pthread_self();
  if (have_main_thread && pthread_equal(self, main_thread))
    return (uintptr_t)__libc_stack_end;
  return (uintptr_t)self;
}

/* Frame-pointer walk: [fp] = caller's fp, [fp + 8] = return address. Every
 * step is bounded: fp 8-aligned, strictly increasing, below the stack top,
 * so it only reads this thread's live stack even through frames compiled
 * without frame pointers (which end the walk early, or add a wrong pc).
 * With only_caller set, it stops at the first frame outside this library. */
static __attribute__((noinline)) uint32_t fp_walk(uint64_t *pcs, uint32_t max, int only_caller) {
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
  uintptr_t top = stack_top();
  uint32_t n = 0;
  if (fp >= top || top - fp > (UINT64_C(1) << 30))
    return 0; /* not on the stack we know (a sigaltstack, a coroutine) */
  while (n < max) {
    if ((fp & 7) || fp + 16 > top)
      break;
    const uintptr_t *frame = (const uintptr_t *)fp;
    uintptr_t next = frame[0], ret = frame[1];
    if (ret == 0)
      break;
    pcs[n++] = ret;
    if (only_caller && (ret < own_start || ret >= own_end))
      break;
    if (next <= fp)
      break;
    fp = next;
  }
  return n;
}

static uint32_t raw_unwind(uint64_t *pcs, uint32_t max) {
  switch (active) {
  case HS_UNWINDER_LIBUNWIND: {
    /* uint64_t and void * have the same size and representation here. */
    int n = unw_backtrace_p((void **)pcs, (int)max);
    return n > 0 ? (uint32_t)n : 0;
  }
  case HS_UNWINDER_NONE:
    return fp_walk(pcs, max, 1);
  default:
    return fp_walk(pcs, max, 0);
  }
}

uint32_t hs_unwind(uint64_t *pcs, uint32_t max_frames, int *truncated) {
  _Static_assert(sizeof(void *) == sizeof(uint64_t), "64-bit only");
  uint64_t buf[HS_MAX_FRAMES + OWN_FRAMES_SLACK];
  uint32_t want = max_frames + OWN_FRAMES_SLACK;
  uint32_t n = raw_unwind(buf, want);
  /* unw_backtrace() reports its own frame first, so our frames may start
   * one or two entries in: skip to the first of ours among the leading few,
   * then past all of ours. */
  uint32_t skip = 0;
  while (skip < n && skip < 4 && !(buf[skip] >= own_start && buf[skip] < own_end))
    skip++;
  if (skip == n || skip == 4)
    skip = 0; /* none of ours on top: keep everything */
  while (skip < n && buf[skip] >= own_start && buf[skip] < own_end)
    skip++;
  uint32_t depth = n - skip;
  *truncated = depth > max_frames || (n == want && active != HS_UNWINDER_NONE);
  if (depth > max_frames)
    depth = max_frames;
  memcpy(pcs, buf + skip, depth * sizeof(uint64_t));
  return depth;
}

/* libunwind's default cache of unwind info is global and behind a lock:
 * threads that sample at the same time queue on it (measured: 4 threads
 * spent 25x the unwinding time of 1 thread for the same samples). A cache
 * per thread has no lock. UNW_CACHE_PER_THREAD = 2 in libunwind.h; the
 * symbols are the x86_64 local-only names, as we build without the header. */
static void per_thread_cache(void *libunwind) {
  typedef int (*set_policy_fn)(void *as, int policy);
  set_policy_fn set_policy = (set_policy_fn)dlsym(libunwind, "_ULx86_64_set_caching_policy");
  void **local_as = (void **)dlsym(libunwind, "_ULx86_64_local_addr_space");
  if (set_policy && local_as && *local_as)
    (void)set_policy(*local_as, 2);
}

uint32_t hs_unwind_init(uint32_t requested) {
  /* The constructor runs on the main thread when preloaded; if we were
   * loaded by another thread, no thread is treated as the main one (its
   * frame-pointer walks then find no bound and return nothing). */
  if (syscall(SYS_gettid) == getpid()) {
    main_thread = pthread_self();
    have_main_thread = 1;
  }
  dl_iterate_phdr(find_own_text, (void *)(uintptr_t)&hs_unwind_init);
  active = HS_UNWINDER_FP;
  if (requested == HS_UNWINDER_NONE) {
    active = HS_UNWINDER_NONE;
  } else if (requested == HS_UNWINDER_AUTO || requested == HS_UNWINDER_LIBUNWIND) {
    /* RTLD_LOCAL: libunwind also exports a weak `backtrace`, which must not
     * replace glibc's for the program. */
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h) {
      unw_backtrace_p = (unw_backtrace_fn)dlsym(h, "unw_backtrace");
      if (unw_backtrace_p)
        active = HS_UNWINDER_LIBUNWIND;
      per_thread_cache(h);
    }
  }
  /* Warm up: the first unwind allocates (libunwind's per-thread cache and
   * its dl_iterate_phdr bookkeeping). */
  uint64_t pcs[8];
  int truncated;
  (void)hs_unwind(pcs, 8, &truncated);
  return active;
}
