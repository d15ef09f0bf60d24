/* unwind.c: see unwind.h. */
#include "unwind.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "inject.h"
#include "state.h"
#include "wire.h"

typedef int (*unw_backtrace_fn)(void **buffer, int size);

static uint32_t active = HS_UNWINDER_FP;
static unw_backtrace_fn unw_backtrace_p;
static uintptr_t own_start, own_end; /* our executable segment */

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

/* Frame-pointer walk: [fp] = caller's fp, [fp + 8] = return address. Every
 * frame is checked against this thread's stack before it is read: fp
 * 8-aligned, strictly increasing, and lo <= fp <= hi - 16, compared without
 * arithmetic on the loaded value, which may be anything: code built without
 * frame pointers uses %rbp as a plain register (alignment masks such as -16
 * or -8 are common, and a signal handler's frame saves whatever the
 * interrupted code had), and `fp + 16 > hi` wraps for those. A walk that
 * starts on the alternate signal stack stays on it; one that starts on no
 * stack we know (a coroutine's) returns nothing. With only_caller set, it
 * stops at the first frame outside this library. */
static __attribute__((noinline)) uint32_t fp_walk(uint64_t *pcs, uint32_t max, int only_caller) {
  struct hs_thread *t = &hs_thread_state;
  if (!t->stack_known)
    hs_thread_stack_bounds(t);
  uintptr_t lo = t->stack_lo, hi = t->stack_hi;
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
  uint32_t n = 0;
  if (fp < lo || fp >= hi) {
    /* A signal handler on the alternate stack: walk that one only. */
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0 || !(ss.ss_flags & SS_ONSTACK))
      return 0;
    lo = (uintptr_t)ss.ss_sp;
    hi = lo + ss.ss_size;
  }
  if (hi - lo < 16 || fp < lo || fp > hi - 16 || (fp & 7))
    return 0;
  while (n < max) {
    /* Here lo <= fp <= hi - 16 and fp is 8-aligned: both words are on the
     * live part of our stack. */
    const uintptr_t *frame = (const uintptr_t *)fp;
    uintptr_t next = frame[0], ret = frame[1];
    if (ret == 0)
      break;
    pcs[n++] = ret;
    if (only_caller && (ret < own_start || ret >= own_end))
      break;
    if (next <= fp || next > hi - 16 || (next & 7))
      break;
    fp = next;
  }
  return n;
}

hs_unw_backtrace_fn hs_unw_backtrace;
int hs_unwind_cfa;

uint32_t hs_unwind_raw(uint64_t *buf, uint32_t want) {
  switch (active) {
  case HS_UNWINDER_LIBUNWIND: {
    /* uint64_t and void * have the same size and representation here. */
    int n = unw_backtrace_p((void **)buf, (int)want);
    return n > 0 ? (uint32_t)n : 0;
  }
  case HS_UNWINDER_NONE:
    return fp_walk(buf, want, 1);
  default:
    return fp_walk(buf, want, 0);
  }
}

uint32_t hs_unwind_trim(const uint64_t *buf, uint32_t n, uint32_t max_frames, int *truncated,
                        uint32_t *first) {
  uint32_t want = max_frames + HS_UNWIND_SLACK;
  /* pc - own_start < own_len, unsigned: one compare for "ours". */
  uintptr_t start = own_start, len = own_end - own_start;
  /* unw_backtrace() may report its own frame first, so our frames may start
   * one or two entries in: skip to the first of ours among the leading few,
   * then past all of ours. */
  uint32_t lead = n < 4 ? n : 4, skip = 0;
  while (skip < lead && buf[skip] - start >= len)
    skip++;
  if (skip == lead)
    skip = 0; /* none of ours on top: keep everything */
  else
    while (++skip < n && buf[skip] - start < len) {
    }
  uint32_t depth = n - skip;
  *truncated = depth > max_frames || (n == want && active != HS_UNWINDER_NONE);
  if (depth > max_frames)
    depth = max_frames;
  *first = skip;
  return depth;
}

/* ---- HEAPSCOPE_UNWIND_VERIFY=1: our walk against the other unwinder ---- */

static struct {
  uint64_t compared, same, fell_back, differ;
} verify;

static void put(char **p, char *end, const char *s) {
  while (*s && *p < end)
    *(*p)++ = *s++;
}

static void put_num(char **p, char *end, uint64_t v, unsigned base) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  if (base == 16)
    put(p, end, "0x");
  while (n > 0 && *p < end)
    *(*p)++ = tmp[--n];
}

static void put_stack(char **p, char *end, const char *who, const uint64_t *pcs, uint32_t n,
                      int truncated) {
  put(p, end, who);
  put_num(p, end, n, 10);
  put(p, end, truncated ? " truncated:" : ":");
  for (uint32_t i = 0; i < n; i++) {
    put(p, end, " ");
    put_num(p, end, pcs[i], 16);
  }
  put(p, end, "\n");
}

/* Both unwinders from this one frame; buf gets the other's answer (what
 * the profile records), and the first few differences are printed. */
uint32_t hs_unwind_verify(uint64_t *buf, uint32_t want) {
  uint64_t ours[HS_MAX_FRAMES + HS_UNWIND_SLACK];
  if (want > HS_MAX_FRAMES + HS_UNWIND_SLACK)
    want = HS_MAX_FRAMES + HS_UNWIND_SLACK;
  int k = hs_cfa_backtrace(ours, want);
  uint32_t n;
  if (hs_unw_backtrace) {
    int m = hs_unw_backtrace((void **)buf, (int)want);
    n = m > 0 ? (uint32_t)m : 0;
  } else {
    n = hs_unwind_raw(buf, want);
  }
  __atomic_fetch_add(&verify.compared, 1, __ATOMIC_RELAXED);
  if (k < 0) {
    __atomic_fetch_add(&verify.fell_back, 1, __ATOMIC_RELAXED);
    return n;
  }
  uint32_t max = want - HS_UNWIND_SLACK, f1, f2;
  int t1, t2;
  uint32_t d1 = hs_unwind_trim(ours, (uint32_t)k, max, &t1, &f1);
  uint32_t d2 = hs_unwind_trim(buf, n, max, &t2, &f2);
  if (d1 == d2 && t1 == t2 && memcmp(ours + f1, buf + f2, d1 * sizeof(uint64_t)) == 0) {
    __atomic_fetch_add(&verify.same, 1, __ATOMIC_RELAXED);
    return n;
  }
  if (__atomic_fetch_add(&verify.differ, 1, __ATOMIC_RELAXED) < 3) {
    char line[8192], *p = line, *end = line + sizeof line - 1;
    put(&p, end, "heapscope: unwind verify: differ\n");
    put_stack(&p, end, "  cfa ", ours + f1, d1, t1);
    put_stack(&p, end, "  ref ", buf + f2, d2, t2);
    (void)!write(2, line, (size_t)(p - line));
  }
  return n;
}

static void verify_summary(void) {
  char line[256], *p = line, *end = line + sizeof line - 1;
  put(&p, end, "heapscope: unwind verify: compared ");
  put_num(&p, end, __atomic_load_n(&verify.compared, __ATOMIC_RELAXED), 10);
  put(&p, end, " same ");
  put_num(&p, end, __atomic_load_n(&verify.same, __ATOMIC_RELAXED), 10);
  put(&p, end, " fell_back ");
  put_num(&p, end, __atomic_load_n(&verify.fell_back, __ATOMIC_RELAXED), 10);
  put(&p, end, " differ ");
  put_num(&p, end, __atomic_load_n(&verify.differ, __ATOMIC_RELAXED), 10);
  struct hs_cfa_stats st;
  hs_cfa_stats(&st);
  put(&p, end, " misses ");
  put_num(&p, end, st.misses, 10);
  put(&p, end, " fp_steps ");
  put_num(&p, end, st.fp_steps, 10);
  put(&p, end, " giveups ");
  put_num(&p, end, st.giveups, 10);
  put(&p, end, " from_memo ");
  put_num(&p, end, st.memo_hits, 10);
  put(&p, end, " fdes_kept ");
  put_num(&p, end, st.memo_fills, 10);
  put(&p, end, "\n");
  (void)!write(2, line, (size_t)(p - line));
}

__attribute__((destructor)) static void verify_at_exit(void) {
  if (hs_unwind_cfa == 2)
    verify_summary();
}

/* The same walk as a malloc sample's (our CFA walk first): custom heaps'
 * stacks went to libunwind alone, which in some attached sessions gave no
 * frame for any of them. */
uint32_t hs_unwind_in_place(uint64_t *buf, uint32_t max_frames, int *truncated,
                            uint32_t *first) {
  _Static_assert(sizeof(void *) == sizeof(uint64_t), "64-bit only");
  return hs_unwind_here(buf, max_frames, truncated, first);
}

uint32_t hs_unwind(uint64_t *pcs, uint32_t max_frames, int *truncated) {
  uint64_t buf[HS_MAX_FRAMES + HS_UNWIND_SLACK];
  uint32_t first;
  uint32_t depth = hs_unwind_in_place(buf, max_frames, truncated, &first);
  memcpy(pcs, buf + first, depth * sizeof(uint64_t));
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

/* libunwind 1.6 (src/x86_64/Ginit.c: open_pipe, write_validate,
 * validate_mem) checks that an address is readable, when a DWARF step fails
 * and it falls back on the frame chain, by read()ing a pipe it opened once
 * (pipe2) to drain it, then writing one byte from the address into it; a
 * failed read makes it close both ends and open a new pipe. A program that
 * closes its descriptors and opens its own in the freed numbers then has
 * libunwind block in read() on the program's socket, write stack bytes into
 * the program's file, or close the program's descriptors. So, in libunwind's
 * GOT only (hs_inject_object), pipe2 fails: libunwind holds no descriptor
 * and its pipe ends stay -1; read(-1) answers "nothing to drain" (EAGAIN);
 * and syscall(SYS_write, -1, addr, 1) checks addr without any descriptor
 * (see unw_syscall). Everything else passes through. */
static int unw_pipe2(int fds[2], int flags) {
  (void)fds;
  (void)flags;
  errno = EMFILE;
  return -1;
}

static ssize_t unw_read(int fd, void *buf, size_t n) {
  if (fd == -1) {
    errno = EAGAIN;
    return -1;
  }
  return read(fd, buf, n);
}

static long unw_syscall(long nr, ...) {
  va_list ap;
  long a[6];
  va_start(ap, nr);
  for (int i = 0; i < 6; i++)
    a[i] = va_arg(ap, long);
  va_end(ap);
  if (nr == SYS_write && (int)a[0] == -1) {
    /* rt_sigprocmask reads its new set from addr before it looks at `how`:
     * with an invalid `how` it fails with EFAULT when addr is unreadable
     * and EINVAL otherwise, and changes nothing. No descriptor, and a call
     * that sandboxes (seccomp filters a program may install) allow. It
     * reads 8 bytes where libunwind wrote 1: a word at the very end of a
     * mapping is refused, which only ends the stack there. */
    long rc = syscall(SYS_rt_sigprocmask, -1L, a[1], 0L, 8L);
    if (rc == 0 || errno != EFAULT)
      return 1;
    errno = EFAULT;
    return -1;
  }
  return syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static const struct hs_got_hook unw_hooks[] = {
    {"pipe2", (void *)unw_pipe2},
    {"read", (void *)unw_read},
    {"syscall", (void *)unw_syscall},
};

/* Points libunwind's pipe2/read/syscall at the functions above. Returns 1
 * when all three are redirected: only then is libunwind safe to use. */
static int tame_libunwind(void *sym) {
  Dl_info info;
  if (!dladdr(sym, &info) || !info.dli_fbase)
    return 0;
  int n = hs_inject_object((uintptr_t)info.dli_fbase, unw_hooks,
                           sizeof unw_hooks / sizeof unw_hooks[0]);
  return n >= (int)(sizeof unw_hooks / sizeof unw_hooks[0]);
}

uint32_t hs_unwind_init(uint32_t requested) {
  /* The constructor runs on the main thread when preloaded; if we were
   * loaded by another thread, no thread is treated as the main one (its
   * frame-pointer walks then find no bound and return nothing). */
  if (syscall(SYS_gettid) == getpid())
    hs_thread_note_main();
  dl_iterate_phdr(find_own_text, (void *)(uintptr_t)&hs_unwind_init);
  active = HS_UNWINDER_FP;
  const char *check = secure_getenv("HEAPSCOPE_UNWIND_VERIFY");
  int verify = check && check[0] == '1' && check[1] == '\0';
  /* auto loads no libunwind: the CFA walk takes a frame-pointer step where code has no CFI (JIT
   * code), the one guess libunwind made for it, and libunwind with liblzma cost every process
   * ~0.15 ms to load (relocated at once), sampled or not. Verify compares against it. */
  if (requested == HS_UNWINDER_NONE) {
    active = HS_UNWINDER_NONE;
  } else if (requested == HS_UNWINDER_LIBUNWIND || (requested == HS_UNWINDER_AUTO && verify)) {
    /* RTLD_LOCAL: libunwind also exports a weak `backtrace`, which must not
     * replace glibc's for the program. */
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h) {
      unw_backtrace_p = (unw_backtrace_fn)dlsym(h, "unw_backtrace");
      /* Before its first use, which opens the pipe: see tame_libunwind. */
      if (unw_backtrace_p && tame_libunwind((void *)unw_backtrace_p))
        active = HS_UNWINDER_LIBUNWIND;
      else
        hs_debug("libunwind not usable (cannot redirect its pipe); frame pointers", UINT64_MAX);
      per_thread_cache(h);
    }
  }
  hs_unw_backtrace = active == HS_UNWINDER_LIBUNWIND ? unw_backtrace_p : NULL;
  /* Our CFA walk before libunwind (or, when libunwind did not load, before
   * the frame-pointer walk) unless turned off. */
  hs_unwind_cfa = 0;
  if ((requested == HS_UNWINDER_AUTO || requested == HS_UNWINDER_LIBUNWIND) &&
      hs_cfa_init() == 0) {
    const char *off = secure_getenv("HEAPSCOPE_UNWIND_CFA");
    if (verify)
      hs_unwind_cfa = 2;
    else if (!(off && off[0] == '0' && off[1] == '\0'))
      hs_unwind_cfa = 1;
  }
  /* Under --unwinder libunwind, a frame without a rule is libunwind's to step (it also reads
   * a signal frame's context); else the walk steps it by its frame pointer (verify: as auto). */
  hs_cfa_fp_steps = requested == HS_UNWINDER_AUTO || hs_unw_backtrace == NULL ? 1 + verify : 0;
  /* No warm-up unwind through libunwind: its first one in a thread sets up that thread's
   * trace cache (an mmap and ~80k instructions of filling), and it stops reading a frame's
   * CFI once it reaches the loader's start code, checking each word it reads with a system
   * call (~100 of them). Together ~14% of the instructions of a short process under the
   * client, paid by every process of a build even when nothing it allocates is sampled or
   * when our CFA walk takes every stack. Every other thread sets its cache up at its first
   * sample that needs libunwind, inside the hooks' guard; the main thread now does the
   * same. The frame-pointer walk's warm-up (the stack's bounds) stays: it is cheap. */
  if (active != HS_UNWINDER_LIBUNWIND) {
    uint64_t pcs[8];
    (void)hs_unwind_raw(pcs, 8);
  }
  /* Said as what walks the stacks: without libunwind, our CFA walk takes every one it can
   * (hs_unwind_here); frame pointers only finish what it cannot. */
  if (active == HS_UNWINDER_FP && hs_unwind_cfa == 1)
    return HS_UNWINDER_CFA;
  return active;
}
