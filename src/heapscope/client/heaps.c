/*
 * heaps.c: custom heaps. A program that allocates from its own
 * pools (arenas, object pools, slabs, a GPU runtime) reports them through
 * include/heapscope.h, which finds these exported functions at run time:
 *
 *   heapscope_heap_register_v1(name, interval) -> heap id, 0 = not profiled
 *   heapscope_heap_alloc_v1(heap, addr, size)
 *   heapscope_heap_free_v1(heap, addr)
 *
 * Each heap is sampled like malloc (sampler.h) with its own interval (0:
 * the session's) and has its own gapless sequence counter; its records are
 * HS_REC_HEAP_MALLOC / HS_REC_HEAP_FREE (wire.h, "Custom heaps").
 *
 * Sampler. One per heap, not one per thread: per-thread samplers for up to
 * HS_MAX_CUSTOM_HEAPS heaps would need kilobytes of initial-exec TLS, more
 * than glibc keeps for a library dlopen()ed by an attach. The sampler step is
 * a few arithmetic operations under a per-heap spinlock (heapprofd keeps one
 * sampler under one spinlock for everything). The lock is never held across
 * anything that can block, the thread's reentrancy guard is set while it is
 * held (a signal handler that reports an allocation on the same thread
 * passes through instead of spinning on it), and the wait is bounded: past
 * the bound the allocation is not sampled and counted in dropped_records.
 *
 * Frees. The live sampled addresses of custom heaps share the client's
 * address set with malloc's, under the key addr ^ (heap id << 56): an arena
 * block from malloc and the first object carved from it have the same
 * address but different keys. Addresses from 2^56 up are ignored.
 *
 * Ordering. Call heapscope_heap_free() before the memory can be handed out
 * again (before the pool's own free), as the malloc hooks do: the free's
 * sequence number is then always before that of the address's reuse.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "addrset.h"
#include "labels.h"
#include "modules.h"
#include "ring.h"
#include "sampler.h"
#include "stacks.h"
#include "state.h"
#include "unwind.h"
#include "wire.h"

struct custom_heap {
  uint32_t lock;  /* the sampler's */
  uint32_t ready; /* set (release) once the heap is announced */
  struct hs_sampler sampler;
  uint64_t seq; /* next sequence number of this heap, from 1 */
  char name[HS_HEAP_NAME_SIZE];
} __attribute__((aligned(64)));

static struct custom_heap heaps[HS_MAX_CUSTOM_HEAPS];
static uint32_t heap_count; /* under register_lock */
static uint32_t register_lock;

#define SPINS_BEFORE_YIELD 128
#define MAX_YIELDS 10000

/* Bounded spinlock: 1 when taken, 0 when the bound passed. */
static int lock_bounded(uint32_t *lock) {
  for (unsigned i = 0; i < SPINS_BEFORE_YIELD + MAX_YIELDS; i++) {
    if (!__atomic_load_n(lock, __ATOMIC_RELAXED) &&
        !__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE))
      return 1;
    if (i < SPINS_BEFORE_YIELD)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  return 0;
}

static void unlock(uint32_t *lock) { __atomic_store_n(lock, 0, __ATOMIC_RELEASE); }

/* 1..HS_HEAP_NAME_SIZE-1 bytes of [A-Za-z0-9._-], not a name heapscope
 * gives (wire.h: malloc's, Python's, "all"). The same rule is in heaps.py
 * (heapscope.heaps.valid_name), from the same names (wire/heapnames.py). */
static int name_ok(const char *name, size_t *len) {
  if (!name)
    return 0;
  size_t n = strnlen(name, HS_HEAP_NAME_SIZE);
  if (n == 0 || n >= HS_HEAP_NAME_SIZE)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return 0;
  }
  if (strcmp(name, HS_MALLOC_HEAP_NAME) == 0 || strcmp(name, HS_ALL_HEAPS_NAME) == 0 ||
      strcmp(name, HS_PY_HEAP_NAME) == 0 || strcmp(name, HS_MMAP_HEAP_NAME) == 0 ||
      strcmp(name, HS_BRK_HEAP_NAME) == 0)
    return 0; /* "all": --heap all means every heap (store/select.py); Python's: pymem.c; maps.c's */
  *len = n;
  return 1;
}

static struct custom_heap *heap_of(uint32_t id) {
  uint32_t i = id - HS_FIRST_CUSTOM_HEAP; /* id 0 and 1 wrap to large values */
  if (i >= HS_MAX_CUSTOM_HEAPS)
    return NULL;
  struct custom_heap *h = &heaps[i];
  return __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE) ? h : NULL;
}

static uint32_t register_heap(const char *name, size_t len, uint64_t interval) {
  uint32_t id = 0;
  for (uint32_t i = 0; i < heap_count; i++) {
    if (strncmp(heaps[i].name, name, HS_HEAP_NAME_SIZE) == 0)
      return __atomic_load_n(&heaps[i].ready, __ATOMIC_ACQUIRE) ? i + HS_FIRST_CUSTOM_HEAP : 0;
  }
  if (heap_count >= HS_MAX_CUSTOM_HEAPS) {
    hs_debug("too many custom heaps; not profiled:", UINT64_MAX);
    hs_debug(name, UINT64_MAX);
    return 0;
  }
  uint32_t i = heap_count++;
  struct custom_heap *h = &heaps[i];
  memcpy(h->name, name, len);
  h->name[len] = '\0';
  h->seq = 1;
  if (interval == 0)
    interval = hs_session.interval;
  hs_sampler_init(&h->sampler, interval,
                  hs_sampler_mix_seed(hs_session.seed, UINT64_C(1) << 32 | (i + HS_FIRST_CUSTOM_HEAP)));
  struct hs_heap rec;
  memset(&rec, 0, sizeof rec);
  rec.interval = h->sampler.interval; /* as clamped */
  rec.heap_id = i + HS_FIRST_CUSTOM_HEAP;
  memcpy(rec.name, h->name, len + 1);
  int rc = hs_ring_write(&hs_session.ring, HS_REC_HEAP, &rec, sizeof rec, NULL, 0, 0);
  if (!hs_ok(rc))
    return 0;
  if (rc == HS_DROPPED)
    return 0; /* unannounced: the heap stays off (its name keeps the slot) */
  __atomic_store_n(&h->ready, 1, __ATOMIC_RELEASE);
  id = rec.heap_id;
  hs_debug("custom heap registered, id", id);
  return id;
}

HS_EXPORT uint32_t heapscope_heap_register_v1(const char *name, uint64_t interval) {
  size_t len;
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE) || !name_ok(name, &len))
    return 0;
  struct hs_thread *t = &hs_thread_state;
  if (hs_guard_held(t))
    return 0; /* from inside the client (a signal handler): not now */
  int saved_errno = errno;
  int was = hs_guard_enter(t); /* the ring wait may allocate; and see the top of this file */
  uint32_t id = 0;
  if (hs_session_enter()) {
    if (lock_bounded(&register_lock)) {
      id = register_heap(name, len, interval);
      unlock(&register_lock);
    }
    hs_session_leave();
  }
  hs_guard_leave(t, was);
  errno = saved_errno;
  return id;
}

static uint64_t key_of(uint32_t id, const void *addr) {
  uint64_t a = (uint64_t)(uintptr_t)addr;
  if (a == 0 || a >> 56)
    return 0;
  return a ^ ((uint64_t)id << 56);
}

/* The stack of this call, interned and sent when new; as record.c's
 * sample_stack(). Returns its id, or sets *failed. */
static uint64_t take_stack(struct hs_ring *r, int *failed) {
  struct hs_ring_meta *m = r->meta;
  uint64_t pcs[HS_MAX_FRAMES];
  int truncated = 0;
  uint32_t depth = hs_unwind(pcs, hs_session.max_frames, &truncated);
  if (depth == 0)
    __atomic_fetch_add(&m->unwinding_errors, 1, __ATOMIC_RELAXED);
  if (truncated)
    __atomic_fetch_add(&m->truncated_stacks, 1, __ATOMIC_RELAXED);
  uint64_t id = hs_stack_id(pcs, depth);
  enum hs_intern in = hs_stacks_intern(id);
  if (in == HS_STACK_KNOWN)
    return id;
  if (in == HS_STACK_FULL)
    __atomic_fetch_add(&m->stack_table_full, 1, __ATOMIC_RELAXED);
  int rc = hs_modules_check(r, pcs, depth);
  if (rc >= 0) {
    struct hs_stack st = {id, depth, truncated ? HS_STACK_TRUNCATED : 0};
    rc = hs_ring_write(r, HS_REC_STACK, &st, sizeof st, pcs, depth * sizeof(uint64_t), 0);
  }
  if (rc < 0) {
    (void)hs_ok(rc);
    *failed = 1;
  }
  return id;
}

static void sample(struct custom_heap *h, uint32_t id, uint64_t key, const void *addr,
                   uint64_t size, uint64_t sample_size) {
  struct hs_ring *shared = &hs_session.ring;
  int failed = 0;
  uint64_t stack_id = take_stack(shared, &failed);
  if (failed)
    return;
  /* The same ring, with this heap's sequence counter. */
  struct hs_ring r = *shared;
  r.seq = &h->seq;
  struct hs_heap_malloc rec = {0, id, hs_labels_sample(), (uint64_t)(uintptr_t)addr, sample_size, size,
                               stack_id, hs_record_ns()};
  int rc = hs_ring_write(&r, HS_REC_HEAP_MALLOC, &rec, sizeof rec, NULL, 0, 1);
  if (!hs_ok(rc))
    return;
  if (rc == HS_DROPPED)
    return; /* never announced: its free must not be either */
  if (hs_addrset_insert((const void *)(uintptr_t)key) != HS_OK)
    __atomic_fetch_add(&shared->meta->addr_table_full, 1, __ATOMIC_RELAXED);
}

HS_EXPORT void heapscope_heap_alloc_v1(uint32_t id, const void *addr, uint64_t size) {
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    return;
  struct custom_heap *h = heap_of(id);
  struct hs_thread *t = &hs_thread_state;
  uint64_t key = key_of(id, addr);
  if (!h || key == 0 || size == 0 || hs_guard_held(t))
    return;
  int saved_errno = errno;
  int was = hs_guard_enter(t); /* unwinding and the ring wait may allocate */
  if (hs_session_enter()) {
    uint64_t sample_size = 0;
    if (lock_bounded(&h->lock)) {
      sample_size = hs_sampler_sample(&h->sampler, size);
      unlock(&h->lock);
    } else {
      __atomic_fetch_add(&hs_session.ring.meta->dropped_records, 1, __ATOMIC_RELAXED);
    }
    if (sample_size)
      sample(h, id, key, addr, size, sample_size);
    hs_session_leave();
  }
  hs_guard_leave(t, was);
  errno = saved_errno;
}

HS_EXPORT void heapscope_heap_free_v1(uint32_t id, const void *addr) {
  /* An unsampled address (almost every free) stops at the filter: the key's
   * bucket is addr's (addrset.h), and nothing else is read before it. */
  if (HS_LIKELY(!hs_addr_maybe_sampled(addr)))
    return;
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    return;
  struct custom_heap *h = heap_of(id);
  struct hs_thread *t = &hs_thread_state;
  uint64_t key = key_of(id, addr);
  if (!h || key == 0 || hs_guard_held(t))
    return;
  if (!hs_addrset_contains((const void *)(uintptr_t)key))
    return; /* not sampled, or never reported: ignored */
  int saved_errno = errno;
  int was = hs_guard_enter(t);
  if (hs_session_enter()) {
    if (hs_addrset_remove((const void *)(uintptr_t)key)) {
      struct hs_ring r = hs_session.ring;
      r.seq = &h->seq;
      struct hs_heap_free rec = {0, id, 0, (uint64_t)(uintptr_t)addr, hs_record_ns()};
      int rc = hs_ring_write(&r, HS_REC_HEAP_FREE, &rec, sizeof rec, NULL, 0, 1);
      (void)hs_ok(rc);
    }
    hs_session_leave();
  }
  hs_guard_leave(t, was);
  errno = saved_errno;
}

/* The public header's function types must match the definitions above. */
#include "../include/heapscope.h"
static const heapscope_register_fn check_register __attribute__((unused)) =
    heapscope_heap_register_v1;
static const heapscope_alloc_fn check_alloc __attribute__((unused)) = heapscope_heap_alloc_v1;
static const heapscope_free_fn check_free __attribute__((unused)) = heapscope_heap_free_v1;
