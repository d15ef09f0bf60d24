/*
 * A test-only shared library around client/pyframes.c, loaded with ctypes by
 * pyframes_target.py. probe_walk() walks the calling thread's Python frames
 * and resolves each code object with hs_py_code_info(), in one C call (with
 * the GIL released: ctypes.CDLL drops it), and prints them as text lines:
 *
 *   flags <TAB> lasti <TAB> first_line <TAB> line_format <TAB> name <TAB>
 *   file <TAB> line table in hex <NL>
 *
 * then a last line "why <TAB> bits". The line numbers are computed by the
 * test with bookkeeping/pylines.py, outside this process.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pyframes.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int probe_detect(void) {
  return hs_py_detect();
}

EXPORT int probe_detect_as(unsigned long hexversion, int free_threaded) {
  return hs_py_detect_as(hexversion, free_threaded);
}

EXPORT const char *probe_status(void) {
  return hs_py_status_line();
}

/* Keys of two code objects (distinct if the objects differ) and of a
 * non-code object (0). */
EXPORT int probe_keys(uint64_t code_a, uint64_t code_b, uint64_t not_code) {
  uint64_t a = hs_py_code_key(code_a), b = hs_py_code_key(code_b);
  return a != 0 && b != 0 && a != b && a == hs_py_code_key(code_a) && hs_py_code_key(not_code) == 0;
}

EXPORT int probe_eval_range_known(void) {
  uint64_t lo, hi;
  hs_py_eval_range(&lo, &hi);
  return lo != 0 && hi > lo;
}

struct out {
  char *buf;
  size_t cap, len;
};

static void put(struct out *o, const char *s, size_t n) {
  if (o->len + n >= o->cap) n = o->cap > o->len + 1 ? o->cap - o->len - 1 : 0;
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = '\0';
}

static void putf(struct out *o, const char *fmt, long a, long b, long c, long d) {
  char tmp[128];
  int n = snprintf(tmp, sizeof tmp, fmt, a, b, c, d);
  if (n > 0) put(o, tmp, (size_t)n);
}

/* Mean nanoseconds of one hs_py_walk() of the calling thread's frames. */
EXPORT double probe_bench(int iterations) {
  struct hs_py_frame frames[256];
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < iterations; i++) (void)hs_py_walk(frames, 256, NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / iterations;
}

/* Returns the number of frames, -1 if a code object did not resolve, -2 if
 * hs_py_walk_keyed() disagrees with hs_py_walk() and hs_py_code_key(). */
EXPORT int probe_walk(char *buf, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  struct hs_py_frame frames[256];
  unsigned why = 0;
  struct out o = {buf, cap, 0};
  buf[0] = '\0';
  int n = hs_py_walk(frames, 256, &why);
  /* The sampler's walk (hs_py_walk_keyed) sees the same frames, with each
   * frame's code key in place of its address. */
  struct hs_py_frame keyed[256];
  uint64_t codes[256];
  unsigned why_keyed = 0;
  struct hs_py_walk_info info;
  if (hs_py_walk_keyed(keyed, codes, 256, &why_keyed, &info) != n || why_keyed != why) return -2;
  if (info.hash != hs_py_part_hash(keyed, n) || info.fresh < 0 || info.fresh > n) return -2;
  for (int i = 0; i < n; i++)
    if ((i < info.fresh && codes[i] != frames[i].code) || keyed[i].code != hs_py_code_key(frames[i].code) ||
        keyed[i].lasti != frames[i].lasti || keyed[i].flags != frames[i].flags)
      return -2;
  for (int i = 0; i < n; i++) {
    char name[512], file[1024];
    uint8_t table[16384];
    struct hs_py_code_info info = {name, sizeof name, 0, file, sizeof file, 0,
                                   table, sizeof table, 0, 0, 0, 0};
    if (hs_py_code_info(frames[i].code, &info) != 0) return -1;
    if (hs_py_code_key(frames[i].code) == 0) return -1;
    putf(&o, "%ld\t%ld\t%ld\t%ld\t", (long)frames[i].flags, (long)frames[i].lasti,
         (long)info.first_line, (long)info.line_format);
    put(&o, name, info.name_len);
    put(&o, "\t", 1);
    put(&o, file, info.file_len);
    put(&o, "\t", 1);
    for (uint32_t k = 0; k < info.table_len; k++) {
      char h[2] = {hex[table[k] >> 4], hex[table[k] & 15]};
      put(&o, h, 2);
    }
    put(&o, "\n", 1);
  }
  putf(&o, "why\t%ld\n", (long)why, 0, 0, 0);
  return n;
}

#ifdef PROBE_PRELOAD
/*
 * Built with -DPROBE_PRELOAD this file is also an LD_PRELOAD library: its
 * malloc() walks the allocating thread's frames on every Nth call
 * (N = $PROBE_EVERY, default 1), from
 * inside the allocator, as the client's hook will, and resolves every code
 * object. At exit it prints the counts to stderr for test_pyframes.py.
 */
#include <stdlib.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);

static __thread int in_probe; /* the walk itself must not recurse */
static unsigned long every = 1, calls, walks, frames_seen, invalid, truncated, nostate, code_fail;
/* The sampler's walk (with its memo) against the plain one, in every walk:
 * walks that differed, and frames the memo gave. */
static unsigned long keyed_bad, reused;

EXPORT void *malloc(size_t size) {
  void *p = __libc_malloc(size);
  if (in_probe || __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) % every != 0) return p;
  in_probe = 1;
  struct hs_py_frame frames[128];
  unsigned why = 0;
  int n = hs_py_walk(frames, 128, &why);
  __atomic_add_fetch(&walks, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&frames_seen, (unsigned long)n, __ATOMIC_RELAXED);
  if (why & HS_PY_WALK_INVALID) __atomic_add_fetch(&invalid, 1, __ATOMIC_RELAXED);
  if (why & HS_PY_WALK_TRUNCATED) __atomic_add_fetch(&truncated, 1, __ATOMIC_RELAXED);
  if (why & HS_PY_WALK_NOSTATE) __atomic_add_fetch(&nostate, 1, __ATOMIC_RELAXED);
  struct hs_py_frame keyed[128];
  uint64_t codes[128];
  unsigned why_keyed = 0;
  struct hs_py_walk_info info;
  int bad = hs_py_walk_keyed(keyed, codes, 128, &why_keyed, &info) != n || why_keyed != why ||
            info.hash != hs_py_part_hash(keyed, n > 0 ? n : 0) || info.fresh < 0 || info.fresh > n;
  for (int i = 0; !bad && i < n; i++)
    bad = (i < info.fresh && codes[i] != frames[i].code) ||
          keyed[i].code != hs_py_code_key(frames[i].code) || keyed[i].lasti != frames[i].lasti ||
          keyed[i].flags != frames[i].flags;
  if (bad) __atomic_add_fetch(&keyed_bad, 1, __ATOMIC_RELAXED);
  if (!bad && n > info.fresh) __atomic_add_fetch(&reused, (unsigned long)(n - info.fresh), __ATOMIC_RELAXED);
  for (int i = 0; i < n; i++) {
    char name[256], file[512];
    uint8_t table[4096];
    struct hs_py_code_info info = {name, sizeof name, 0, file, sizeof file, 0,
                                   table, sizeof table, 0, 0, 0, 0};
    if (hs_py_code_info(frames[i].code, &info) != 0 || info.name_len == 0 || info.file_len == 0)
      __atomic_add_fetch(&code_fail, 1, __ATOMIC_RELAXED);
  }
  in_probe = 0;
  return p;
}

__attribute__((constructor)) static void probe_start(void) {
  in_probe = 1;
  const char *e = getenv("PROBE_EVERY");
  if (e != NULL && strtoul(e, NULL, 10) > 0) every = strtoul(e, NULL, 10);
  (void)hs_py_detect();
  in_probe = 0;
}

__attribute__((destructor)) static void probe_end(void) {
  char line[256];
  in_probe = 1;
  int k = snprintf(line, sizeof line,
                   "probe: state %d walks %lu frames %lu invalid %lu truncated %lu nostate %lu "
                   "code_fail %lu keyed_bad %lu reused %lu\n",
                   hs_py_state(), walks, frames_seen, invalid, truncated, nostate, code_fail,
                   keyed_bad, reused);
  if (k > 0) (void)!write(2, line, (size_t)k);
}
#endif
