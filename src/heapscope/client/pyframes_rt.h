/*
 * pyframes_rt.h: what the CPython walker (pyframes.c) and the copying of
 * code objects (pycode.c) share: the runtime found by the detection, the
 * bounds, the validated loads and the code keys. Private to the two; the
 * rest of the client sees pyframes.h.
 */
#ifndef HEAPSCOPE_CLIENT_PYFRAMES_RT_H
#define HEAPSCOPE_CLIENT_PYFRAMES_RT_H

#include <stdint.h>

#include "pyframes.h"

/* Bounds. The chain bound stops a cycle; strings and tables longer than
 * these are not names or line tables we want. */
#define MAX_CHAIN_STEPS 100000
#define MAX_STR_CHARS (1u << 20)
#define MAX_CODE_UNITS (1u << 26)

typedef void *(*get_tstate_fn)(void);
typedef int (*is_initialized_fn)(void);

struct py_runtime {
  const struct hs_py_layout *lay; /* NULL unless supported */
  get_tstate_fn get_tstate;
  is_initialized_fn is_initialized;
  uintptr_t code_type, frame_type, unicode_type, bytes_type;
  uint64_t eval_lo, eval_hi;
  unsigned long hexversion;
};

/* Set by the detection (pyframes.c) before its state is published. */
extern struct py_runtime hs_py_rt __attribute__((visibility("hidden")));

/* ------------------------------------------------------------------ */
/* Validated loads                                                     */

/* Non-NULL, not in the first page, canonical user space (x86-64 and
 * aarch64 both stay below 2^47 for user space by default), aligned. */
static inline int ptr_ok(uintptr_t p, uintptr_t align) {
  return p >= 4096 && p < ((uintptr_t)1 << 47) && (p & (align - 1)) == 0;
}

static inline uintptr_t load_ptr(uintptr_t base, unsigned off) {
  return *(const volatile uintptr_t *)(base + off);
}
static inline int32_t load_i32(uintptr_t base, unsigned off) {
  return *(const volatile int32_t *)(base + off);
}
static inline int8_t load_i8(uintptr_t base, unsigned off) {
  return *(const volatile int8_t *)(base + off);
}

/* p is an object whose type is exactly `type`. */
static inline int is_a(uintptr_t p, uintptr_t type) {
  return ptr_ok(p, 8) && load_ptr(p, hs_py_rt.lay->ob_type) == type;
}

/* ------------------------------------------------------------------ */
/* Code keys (hook-safe)                                               */

/* splitmix64's finalizer: every bit of the input moves every bit. */
static inline uint64_t finish(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t v, unsigned r) {
  return (v << r) | (v >> (64 - r));
}

/* The key of a code object already checked to be one (hs_py_code_key): its
 * address and the addresses of its name, file and line table, each turned
 * by a different amount (user-space pointers have their top 17 bits clear,
 * so the four land on different bits), its first line, then the finalizer.
 * Computed once per frame of every sample: a third of the instructions of
 * a multiply-rotate step per field. */
static inline __attribute__((always_inline)) uint64_t key_from(uintptr_t code, uint64_t name,
                                                               uint64_t file, uint64_t lines,
                                                               int32_t firstline) {
  uint64_t h = code ^ rotl(name, 16) ^ rotl(file, 32) ^ rotl(lines, 48);
  h = finish(h * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uint32_t)firstline);
  return h ? h : 1;
}

static inline __attribute__((always_inline)) uint64_t key_of(const struct hs_py_layout *L,
                                                             uintptr_t code) {
  return key_from(code, load_ptr(code, L->co_qualname ? L->co_qualname : L->co_name),
                  load_ptr(code, L->co_filename), load_ptr(code, L->co_lines),
                  load_i32(code, L->co_firstlineno));
}

#endif
