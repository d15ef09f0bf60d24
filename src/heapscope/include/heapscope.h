/*
 * heapscope.h: report the allocations of your own pools (arenas, object
 * pools, slabs, memory from a GPU runtime) to heapscope as named heaps.
 *
 *   #include <heapscope.h>        // cc -I"$(heapscope --include)" ...
 *
 *   static uint32_t arena_heap;
 *   arena_heap = heapscope_heap_register("myapp.arena"); // 0: not profiled
 *   void *p = arena_alloc(a, n);  heapscope_heap_alloc(arena_heap, p, n);
 *   heapscope_heap_free(arena_heap, p);  arena_free(a, p);
 *
 * Nothing to link: the functions live in heapscope's client library, which
 * `heapscope record` preloads into the program, and are found at run time
 * with dlsym(). Without record (or on a process heapscope does not profile)
 * register returns 0, and alloc/free on heap 0 cost one predictable branch
 * (benchmarks/heaps_noop.py measures it). glibc before 2.34 needs -ldl.
 *
 * Names: 1 to 31 characters of [A-Za-z0-9._-], not "libc.malloc" nor "all".
 * A bad name gives 0. Registering a name again returns the same heap.
 * Up to 64 heaps per process; each is sampled like malloc, with the
 * session's interval or its own (heapscope_heap_register_interval).
 *
 * Report a free BEFORE the memory can be handed out again (before the
 * pool's own free), so that its reuse is always ordered after it. Frees of
 * addresses never reported (or not sampled) are ignored. Addresses are any
 * non-zero values below 2^56; each heap has its own address space.
 *
 * The calls never block the program for long, never fail it, and keep
 * errno.
 *
 * Attach (record -p): register calls made before heapscope attached
 * returned 0, and a heap id of 0 stays a no-op. Register again to get the
 * heap: while not profiled, a register call looks the functions up again
 * (one dlsym, about 0.3 us here), so calling it now and then while the id is 0
 * (at a phase boundary, every N pool refills) is cheap; the alloc/free
 * path stays one branch. The objects handed out before the new id are not
 * seen, their frees are ignored.
 */
#ifndef HEAPSCOPE_H
#define HEAPSCOPE_H

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#ifdef RTLD_DEFAULT
#define HEAPSCOPE__DEFAULT RTLD_DEFAULT
#else
#define HEAPSCOPE__DEFAULT ((void *)0) /* its value in glibc and musl */
#endif

/* The client's exported functions (client/heaps.c); ABI version 1. */
typedef uint32_t (*heapscope_register_fn)(const char *name, uint64_t interval);
typedef void (*heapscope_alloc_fn)(uint32_t heap, const void *addr, uint64_t size);
typedef void (*heapscope_free_fn)(uint32_t heap, const void *addr);

/* Looked up once per translation unit; racing threads find the same values. */
static struct {
  heapscope_register_fn reg;
  heapscope_alloc_fn alloc;
  heapscope_free_fn free_;
  int looked_up;
} heapscope__api __attribute__((unused));

static inline void *heapscope__find(const char *name) {
  return dlsym(HEAPSCOPE__DEFAULT, name);
}

static inline void heapscope__lookup(void) {
  heapscope_register_fn reg;
  heapscope_alloc_fn alloc;
  heapscope_free_fn free_;
  void *p;
  /* memcpy: ISO C has no cast from void * to a function pointer. */
  p = heapscope__find("heapscope_heap_register_v1");
  memcpy(&reg, &p, sizeof reg);
  alloc = 0, free_ = 0;
  if (reg) { /* not profiled: one dlsym, not three (register looks up again each call) */
    p = heapscope__find("heapscope_heap_alloc_v1");
    memcpy(&alloc, &p, sizeof alloc);
    p = heapscope__find("heapscope_heap_free_v1");
    memcpy(&free_, &p, sizeof free_);
  }
  if (!reg || !alloc || !free_)
    reg = 0, alloc = 0, free_ = 0;
  __atomic_store_n(&heapscope__api.reg, reg, __ATOMIC_RELAXED);
  __atomic_store_n(&heapscope__api.alloc, alloc, __ATOMIC_RELAXED);
  __atomic_store_n(&heapscope__api.free_, free_, __ATOMIC_RELAXED);
  __atomic_store_n(&heapscope__api.looked_up, 1, __ATOMIC_RELEASE);
}

/* A heap sampled with its own mean interval in bytes (0: the session's,
 * 1: every allocation). Returns its id, or 0 when not profiled. Not found
 * before: looked up again, so a client loaded since (an attach) is found. */
static inline uint32_t heapscope_heap_register_interval(const char *name, uint64_t interval) {
  heapscope_register_fn reg = 0;
  if (__atomic_load_n(&heapscope__api.looked_up, __ATOMIC_ACQUIRE))
    reg = __atomic_load_n(&heapscope__api.reg, __ATOMIC_RELAXED);
  if (!reg) {
    heapscope__lookup();
    reg = __atomic_load_n(&heapscope__api.reg, __ATOMIC_RELAXED);
  }
  return reg ? reg(name, interval) : 0;
}

/* A heap sampled with the session's interval. Returns its id, or 0. */
static inline uint32_t heapscope_heap_register(const char *name) {
  return heapscope_heap_register_interval(name, 0);
}

/* Inlined even at -O0, so that the caller is the leaf frame of a sample. */
#define HEAPSCOPE__INLINE static inline __attribute__((always_inline))

/* `size` bytes at addr were handed out from heap. */
HEAPSCOPE__INLINE void heapscope_heap_alloc(uint32_t heap, const void *addr, uint64_t size) {
  if (__builtin_expect(heap != 0, 0)) {
    heapscope_alloc_fn fn = __atomic_load_n(&heapscope__api.alloc, __ATOMIC_RELAXED);
    if (!fn) { /* the heap was registered from another translation unit */
      heapscope__lookup();
      fn = __atomic_load_n(&heapscope__api.alloc, __ATOMIC_RELAXED);
    }
    if (fn)
      fn(heap, addr, size);
  }
}

/* addr goes back to heap: call it before the pool can reuse addr. */
HEAPSCOPE__INLINE void heapscope_heap_free(uint32_t heap, const void *addr) {
  if (__builtin_expect(heap != 0, 0)) {
    heapscope_free_fn fn = __atomic_load_n(&heapscope__api.free_, __ATOMIC_RELAXED);
    if (!fn) {
      heapscope__lookup();
      fn = __atomic_load_n(&heapscope__api.free_, __ATOMIC_RELAXED);
    }
    if (fn)
      fn(heap, addr);
  }
}

/* ---- Allocation labels (docs/labels.md) ----
 *   heapscope_label_push("tenant", "acme");
 *   handle(request);              // its samples carry tenant=acme
 *   heapscope_label_pop();
 * A stack per thread: a push adds key=value to the thread's current set
 * (replacing the key's value), a pop goes back to the set before it. Keys:
 * 1 to 63 characters of [A-Za-z0-9_.-]; values: up to 127 bytes, no NUL.
 * Up to 16 levels; a push past that, or with a bad key or value, or while
 * not profiled, returns -1 and still counts as a level (pop it as usual).
 * Not profiled: the functions are looked up once per executable or library
 * and then again every 4096 calls (to find a client an attach loaded since);
 * the calls between are one predictable branch. Until a first lookup has
 * ended every push looks for itself: threads that start together would
 * otherwise take another thread's lookup under way for "not profiled". */
typedef int (*heapscope_label_push_fn)(const char *key, const char *value);
typedef void (*heapscope_label_pop_fn)(void);

/* One for the whole executable or library, not one per translation unit (weak: each file
 * that includes this defines it, the linker keeps one): a push in one file and its pop in
 * another reach the same client. */
struct heapscope__label_state {
  heapscope_label_push_fn push;
  heapscope_label_pop_fn pop;
  uint32_t misses; /* calls made while not found */
  int looked_up;   /* a lookup has ended */
};
__attribute__((weak, visibility("hidden"))) struct heapscope__label_state heapscope__labels;

static inline void heapscope__label_lookup(void) {
  heapscope_label_push_fn push;
  heapscope_label_pop_fn pop;
  void *p = heapscope__find("heapscope_label_push_v1");
  memcpy(&push, &p, sizeof push);
  p = heapscope__find("heapscope_label_pop_v1");
  memcpy(&pop, &p, sizeof pop);
  /* Stored only when found: a lookup that found nothing and ends after another found
   * the client must not undo it (a level pushed would then never be popped). */
  if (push && pop) {
    __atomic_store_n(&heapscope__labels.pop, pop, __ATOMIC_RELAXED);
    __atomic_store_n(&heapscope__labels.push, push, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&heapscope__labels.looked_up, 1, __ATOMIC_RELEASE);
}

static inline int heapscope_label_push(const char *key, const char *value) {
  heapscope_label_push_fn fn = __atomic_load_n(&heapscope__labels.push, __ATOMIC_ACQUIRE);
  if (__builtin_expect(!fn, 0)) {
    if ((__atomic_fetch_add(&heapscope__labels.misses, 1, __ATOMIC_RELAXED) & 4095u) != 0 &&
        __atomic_load_n(&heapscope__labels.looked_up, __ATOMIC_ACQUIRE))
      return -1;
    heapscope__label_lookup();
    fn = __atomic_load_n(&heapscope__labels.push, __ATOMIC_ACQUIRE);
    if (!fn)
      return -1;
  }
  return fn(key, value);
}

/* Pops what the thread's last push pushed. A pop whose push found no client
 * is a no-op, as that push was. */
static inline void heapscope_label_pop(void) {
  heapscope_label_pop_fn fn = __atomic_load_n(&heapscope__labels.pop, __ATOMIC_RELAXED);
  if (fn)
    fn();
}

#endif /* HEAPSCOPE_H */
