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

/* Returns the number of frames, or -1 if a code object did not resolve. */
EXPORT int probe_walk(char *buf, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  struct hs_py_frame frames[256];
  unsigned why = 0;
  struct out o = {buf, cap, 0};
  buf[0] = '\0';
  int n = hs_py_walk(frames, 256, &why);
  for (int i = 0; i < n; i++) {
    char name[512], file[1024];
    uint8_t table[16384];
    struct hs_py_code_info info = {name, sizeof name, 0, file, sizeof file, 0,
                                   table, sizeof table, 0, 0, 0, 0};
    if (hs_py_code_info(frames[i].code, &info) != 0) return -1;
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
