/*
 * record.c: the slow paths of the hooks (record.h), the sampler layer: a
 * sampled allocation's unwind, its Python frames (pysend.h), its stack and
 * record in the ring; the free of a sampled address. Everything a sample
 * does runs under the thread's guard (state.h), set and put back here.
 */
#include "record.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "labels.h"
#include "modules.h"
#include "probes.h"
#include "pyframes.h"
#include "pysend.h"
#include "real.h"
#include "ring.h"
#include "stacks.h"
#include "state.h"
#include "unwind.h"
#include "wire.h"

/* This thread's kernel id for struct hs_malloc: asked of the kernel on the
 * thread's first sample, not on every one (0 = not asked yet). */
static HS_TLS uint32_t thread_tid;

#define STACK_MEMO_SLOTS 4096u
static uint64_t stack_memo[STACK_MEMO_SLOTS]; /* Python stack ids sent this session (sample) */
#define NATIVE_MEMO_SLOTS 1024u
static uint64_t native_checked[NATIVE_MEMO_SLOTS]; /* native parts whose pcs were checked (sample) */

/* Whether this session announced Python's heap (hs_record_announce_py_heap). */
static int py_heap_announced;

void hs_record_thread_init(struct hs_thread *t) {
  uint32_t index = __atomic_fetch_add(&hs_session.threads, 1, __ATOMIC_RELAXED);
  uint64_t mix = hs_sampler_mix_seed(hs_session.seed, index);
  hs_sampler_init(&t->sampler, hs_session.interval, mix);
  t->timed_at = (uint32_t)(mix >> 58); /* 0-63 */
  t->errno_at = &errno;
  t->gen = hs_session.gen;
}

/* The HEAP record of Python's heap, once per session, before the first
 * record of that heap: when CPython is found at the start, else before a
 * late install puts the wrappers in (pymem.c). Outside any hook. */
int hs_record_announce_py_heap(void) {
  if (__atomic_load_n(&py_heap_announced, __ATOMIC_ACQUIRE))
    return HS_OK;
  struct hs_heap heap;
  memset(&heap, 0, sizeof heap);
  heap.interval = hs_session.interval; /* the malloc countdown's (record.h) */
  heap.heap_id = HS_PY_HEAP_ID;
  memcpy(heap.name, HS_PY_HEAP_NAME, sizeof HS_PY_HEAP_NAME);
  int rc = hs_ring_write(&hs_session.ring, HS_REC_HEAP, &heap, sizeof heap, NULL, 0, 0);
  if (rc == HS_OK)
    __atomic_store_n(&py_heap_announced, 1, __ATOMIC_RELEASE);
  return rc < 0 ? rc : HS_OK;
}

/* ---- a sample's Python frames (docs/python-frames.md) ----
 *
 * Here rather than in pysend.c, as before the client's files were cut: a
 * static function of the sample's own file may be called the compiler's way
 * (it knows which registers it uses), which a call into another file cannot
 * be. pysend.c sends the code objects it meets for the first time. */

#define CODE_KEY_SALT UINT64_C(0x5be0cd19137e2179) /* code keys share the stack table */
#define CODE_MEMO_SLOTS 4096u
static uint64_t code_memo[CODE_MEMO_SLOTS]; /* code keys sent this session (python_frames) */

/* Walks this thread's Python frames into py (with their code keys) and
 * sends the code objects not sent yet. Returns the number of frames, or -1
 * when the thread has no Python state (a native thread: the stack then has
 * no Python part), or a negative client error - 1. */
static int python_frames(struct hs_pyframe *py, uint32_t *why_out, uint64_t *hash) {
  struct hs_ring_meta *m = hs_session.ring.meta;
  unsigned why = 0;
  uint64_t codes[HS_MAX_PYFRAMES];
  struct hs_py_walk_info info;
  int n = hs_py_walk_keyed((struct hs_py_frame *)py, codes, HS_MAX_PYFRAMES, &why, &info);
  *why_out = why;
  *hash = info.hash;
  if (n <= 0 && (why & HS_PY_WALK_NOSTATE))
    return -1;
  __atomic_fetch_add(&m->python_walks, 1, __ATOMIC_RELAXED);
  if (HS_UNLIKELY(why & (HS_PY_WALK_INVALID | HS_PY_WALK_TRUNCATED))) {
    if (why & HS_PY_WALK_INVALID)
      __atomic_fetch_add(&m->python_walks_invalid, 1, __ATOMIC_RELAXED);
    if (why & HS_PY_WALK_TRUNCATED)
      __atomic_fetch_add(&m->python_walks_truncated, 1, __ATOMIC_RELAXED);
  }
  /* The frames after the fresh ones are the thread's last walk's (the walk
   * memo, pyframes.c): their code objects were dealt with then. */
  for (int i = 0; i < info.fresh; i++) {
    if (i > 0 && codes[i] == codes[i - 1])
      continue; /* recursion: the same live object, already known or sent */
    uint64_t key = py[i].code_key;
    /* Most samples walk code objects sent long ago (a test runner's 30-odd
     * frames): a small direct-mapped memo of keys known to be sent saves a
     * probe of the big stack table (a cache miss) per frame. Racy by design:
     * a lost or stale slot only sends the question on to the table. */
    uint64_t *memo = &code_memo[key & (CODE_MEMO_SLOTS - 1)];
    if (HS_LIKELY(__atomic_load_n(memo, __ATOMIC_RELAXED) == key))
      continue;
    enum hs_intern in = hs_stacks_intern(key ^ CODE_KEY_SALT);
    if (in == HS_STACK_KNOWN) {
      __atomic_store_n(memo, key, __ATOMIC_RELAXED);
      continue;
    }
    int rc = hs_py_send_code(codes[i], key);
    if (rc < 0)
      return rc - 1;
  }
  return n;
}

/* A sample's parts below are inlined into record_alloc_slow, and the unwind
 * with them (hs_unwind_here): each frame of ours under unw_backtrace is one
 * more step of its walk. */
#define HS_INLINE static inline __attribute__((always_inline))

/* Our own frames, then pcs, then (with Python frames) struct hs_pystack
 * and the frames: the tail of the STACK record in one piece, unwound in
 * place (no copy). */
#define SAMPLE_BUF_WORDS (HS_UNWIND_SLACK + HS_MAX_FRAMES + 1 + 2 * HS_MAX_PYFRAMES)

/* Unwinds into buf; the pcs start at buf + *first. Unwind time, measured on
 * 1 unwind in 64 and scaled: clock_gettime on every sample would be a
 * visible part of the cost. Which one of 64 is a random phase per thread, so
 * the sum is unbiased: timing each thread's first (its coldest: unwind tables
 * read for the first time) counted it 64 times, and a short process with a
 * few samples showed 13-20 ms of unwinding. */
HS_INLINE uint32_t unwind_timed(struct hs_thread *t, struct hs_ring_meta *m, uint64_t *buf,
                                int *truncated, uint32_t *first) {
  uint32_t depth;
  if ((t->unwinds++ & 63) == t->timed_at) {
    uint64_t t0 = hs_now_ns();
    depth = hs_unwind_here(buf, hs_session.max_frames, truncated, first);
    __atomic_fetch_add(&m->unwind_ns, (hs_now_ns() - t0) * 64, __ATOMIC_RELAXED);
  } else {
    depth = hs_unwind_here(buf, hs_session.max_frames, truncated, first);
  }
  if (depth == 0)
    __atomic_fetch_add(&m->unwinding_errors, 1, __ATOMIC_RELAXED);
  if (*truncated)
    __atomic_fetch_add(&m->truncated_stacks, 1, __ATOMIC_RELAXED);
  return depth;
}

/* This sample's stack: unwound into buf, its Python frames after the pcs,
 * its STACK record sent when the stack is new. Its id in *id_out; 0 when
 * the sample goes no further (the client was disabled). */
HS_INLINE int sample_stack(struct hs_thread *t, struct hs_ring_meta *m, uint64_t *buf,
                           uint64_t *id_out) {
  int truncated = 0;
  uint32_t first = 0;
  uint32_t depth = unwind_timed(t, m, buf, &truncated, &first);
  uint64_t *tail = buf + first;
  uint64_t *pcs = tail;
  uint64_t id = hs_stack_id(pcs, depth), native_id = id;
  size_t py_bytes = 0;
  if (__atomic_load_n(&hs_py_on, __ATOMIC_ACQUIRE)) {
    struct hs_pyframe *py = (struct hs_pyframe *)(tail + depth + 1);
    uint32_t why = 0;
    uint64_t part = 0;
    int n = python_frames(py, &why, &part);
    if (n < -1)
      return hs_ok(n + 1);
    if (n >= 0) {
      struct hs_pystack ps = {(uint32_t)n, why};
      memcpy(tail + depth, &ps, sizeof ps);
      py_bytes = sizeof ps + (size_t)n * sizeof(struct hs_pyframe);
      id = hs_stack_id_py(id, (uint32_t)n, part);
    }
  }
  *id_out = id;
  if (!hs_ok(hs_modules_poll(&hs_session.ring)))
    return 0;
  /* Python stacks: a memo of ids known to be sent, as code_memo above,
   * saves the probe of the big table (a cache and TLB miss) when a stack
   * repeats. */
  uint64_t *memo = py_bytes ? &stack_memo[id & (STACK_MEMO_SLOTS - 1)] : NULL;
  enum hs_intern in = HS_STACK_KNOWN;
  if (!memo || __atomic_load_n(memo, __ATOMIC_RELAXED) != id) {
    in = hs_stacks_intern(id);
    if (memo && in == HS_STACK_KNOWN)
      __atomic_store_n(memo, id, __ATOMIC_RELAXED);
  }
  if (in == HS_STACK_KNOWN)
    return 1;
  if (in == HS_STACK_FULL)
    __atomic_fetch_add(&m->stack_table_full, 1, __ATOMIC_RELAXED);
  /* A new Python part over a native part checked lately (objects built
   * down a recursion: every path is a stack of its own) needs no check:
   * its pcs were covered then and still are (modules are never dropped);
   * a rescan that check left pending is done at the next one or at exit. */
  uint64_t *checked = py_bytes ? &native_checked[native_id & (NATIVE_MEMO_SLOTS - 1)] : NULL;
  if (!checked || __atomic_load_n(checked, __ATOMIC_RELAXED) != native_id) {
    if (!hs_ok(hs_modules_check(&hs_session.ring, pcs, depth)))
      return 0;
    if (checked)
      __atomic_store_n(checked, native_id, __ATOMIC_RELAXED);
  }
  struct hs_stack st = {id, depth,
                        (truncated ? HS_STACK_TRUNCATED : 0) | (py_bytes ? HS_STACK_PYTHON : 0)};
  return hs_ok(hs_ring_write(&hs_session.ring, HS_REC_STACK, &st, sizeof st, tail,
                             depth * sizeof(uint64_t) + py_bytes, 0));
}

/* A sample of Python's heap: its HEAP_MALLOC record, its address kept. */
HS_INLINE void book_py(struct hs_ring_meta *m, void *addr, size_t size, uint64_t sample_size,
                       uint64_t id) {
  if (!__atomic_load_n(&py_heap_announced, __ATOMIC_ACQUIRE))
    return; /* unannounced (its HEAP record was dropped): not booked, nor its free */
  struct hs_ring r = hs_session.ring;
  r.seq = &hs_py_seq.next;
  struct hs_heap_malloc hrec = {0, HS_PY_HEAP_ID, hs_labels_sample(), (uint64_t)(uintptr_t)addr, sample_size, size,
                                id, hs_record_ns()};
  int rc = hs_ring_write(&r, HS_REC_HEAP_MALLOC, &hrec, sizeof hrec, NULL, 0, 1);
  if (!hs_ok(rc) || rc == HS_DROPPED)
    return;
  hs_probe_alloc(addr, size, sample_size); /* booked: a tracer sees what the producer sees */
  if (hs_addrset_insert((const void *)((uintptr_t)addr ^ HS_PY_HEAP_KEY)) != HS_OK)
    __atomic_fetch_add(&m->addr_table_full, 1, __ATOMIC_RELAXED);
}

/* A sample of malloc's heap: its MALLOC record, its address kept. */
HS_INLINE void book_malloc(struct hs_ring_meta *m, void *addr, size_t size, uint64_t sample_size,
                           uint64_t id) {
  if (HS_UNLIKELY(thread_tid == 0))
    thread_tid = (uint32_t)syscall(SYS_gettid);
  uint64_t ts = hs_record_ns();
  const uint32_t labels = hs_labels_sample(); /* before the reservation: it may write a record */
  /* Built in the ring where it fits at once (hs_ring_reserve): no copy. */
  const uint64_t rec_size = HS_ALIGN8(8 + sizeof(struct hs_malloc));
  int single;
  unsigned char *dst;
  if (HS_LIKELY(hs_ring_reserve(&hs_session.ring, rec_size, &dst, &single))) {
    struct hs_malloc *in = (struct hs_malloc *)(void *)(dst + 8);
    in->addr = (uint64_t)(uintptr_t)addr;
    in->sample_size = sample_size;
    in->alloc_size = size;
    in->stack_id = id;
    in->ts = ts;
    in->tid = thread_tid;
    in->label_set = labels;
    hs_ring_commit(dst, rec_size, HS_REC_MALLOC, hs_session.ring.seq, single);
  } else {
    struct hs_malloc rec = {0, (uint64_t)(uintptr_t)addr, sample_size, size, id, ts, thread_tid, labels};
    int rc = hs_ring_write_slow(&hs_session.ring, HS_REC_MALLOC, &rec, sizeof rec, NULL, 0, 1);
    if (!hs_ok(rc) || rc == HS_DROPPED)
      return; /* the producer never hears of addr: neither should it of its free */
  }
  /* The weight of otel_memory:alloc is the sample size (probes.h). Fired
   * for the samples the producer gets, so that a tracer's live heap and
   * ours are the same one. */
  hs_probe_alloc(addr, size, sample_size);
  /* Nobody can free addr before we return it, so adding it after the record
   * is written is early enough. */
  if (hs_addrset_insert(addr) != HS_OK)
    __atomic_fetch_add(&m->addr_table_full, 1, __ATOMIC_RELAXED);
}

/* heap: HS_MALLOC_HEAP_ID (HS_REC_MALLOC) or HS_PY_HEAP_ID (HEAP_MALLOC). */
HS_INLINE void sample(struct hs_thread *t, void *addr, size_t size, uint64_t sample_size,
                      uint32_t heap) {
  struct hs_ring_meta *m = hs_session.ring.meta;
  uint64_t buf[SAMPLE_BUF_WORDS];
  uint64_t id = 0;
  if (!sample_stack(t, m, buf, &id))
    return;
  if (heap == HS_PY_HEAP_ID)
    book_py(m, addr, size, sample_size, id);
  else
    book_malloc(m, addr, size, sample_size, id);
}

HS_INLINE void *record_alloc_slow(void *addr, size_t size, uint32_t heap) {
  struct hs_thread *t = &hs_thread_state;
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    return addr;
  /* Not set up yet, or set up for an earlier session (an attach after a
   * detach): this session's interval and seed. */
  if (t->sampler.interval == 0 || t->gen != __atomic_load_n(&hs_session.gen, __ATOMIC_RELAXED))
    hs_record_thread_init(t);
  uint64_t sample_size = hs_sampler_sample(&t->sampler, size);
  /* The guard is looked at here, after the countdown moved, not in the
   * fast path (record.h, hs_alloc_unrecorded): the client's own allocation
   * (or one of a signal handler inside the client) is not recorded. */
  if (sample_size == 0 || addr == NULL || hs_guard_held(t))
    return addr;
  int *err = t->errno_at; /* set with the sampler, above */
  int saved_errno = *err;
  /* Guard: unwinding, the loader and the ring wait may allocate. */
  int was = hs_guard_enter(t); /* 0, seen above: the store of 0 stays as cheap */
  if (hs_session_enter()) {
    sample(t, addr, size, sample_size, heap);
    if (HS_UNLIKELY(__atomic_load_n(&hs_py_late, __ATOMIC_RELAXED) == HS_LATE_WATCH) &&
        hs_modules_libpython_seen())
      hs_py_late_poll();
    hs_session_leave();
  }
  hs_guard_leave(t, was);
  *err = saved_errno;
  return addr;
}

int hs_record_stack(uint64_t *id_out) {
  uint64_t buf[SAMPLE_BUF_WORDS];
  return sample_stack(&hs_thread_state, hs_session.ring.meta, buf, id_out);
}

void *hs_record_alloc_slow(void *addr, size_t size) {
  return record_alloc_slow(addr, size, HS_MALLOC_HEAP_ID);
}

void hs_record_py_alloc_slow(void *addr, size_t size) {
  (void)record_alloc_slow(addr, size, HS_PY_HEAP_ID);
}

/* heap: HS_MALLOC_HEAP_ID (HS_REC_FREE) or HS_PY_HEAP_ID (HEAP_FREE, its own
 * sequence and address key). Inlined with a constant heap. */
HS_INLINE void record_free_slow(void *addr, uint32_t heap) {
  struct hs_thread *t = &hs_thread_state;
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_RELAXED) || addr == NULL)
    return;
  if (HS_UNLIKELY(hs_guard_held(t))) /* the client's own free (see state.h) */
    return;
  /* Guard: a blocking ring wait calls nanosleep/recv; keep any allocation
   * they might do out of the client. errno is not saved here: nothing on
   * this path sets it but the ring wait (hs_ring_write_slow) and the debug
   * line of a disable (hs_debug), which keep it themselves; the address
   * set's writers make no system call that can fail (addrset.c). */
  int was = hs_guard_enter(t);
  if (!hs_session_enter()) {
    hs_guard_leave(t, was);
    return;
  }
  if (heap == HS_MALLOC_HEAP_ID) {
    if (hs_addrset_remove(addr)) {
      /* Its alloc fired: its free does, whatever becomes of the record. */
      hs_probe_free(addr);
      struct hs_free rec = {0, (uint64_t)(uintptr_t)addr, hs_record_ns()};
      (void)hs_ok(hs_ring_write(&hs_session.ring, HS_REC_FREE, &rec, sizeof rec, NULL, 0, 1));
    }
  } else if (hs_addrset_remove((const void *)((uintptr_t)addr ^ HS_PY_HEAP_KEY))) {
    hs_probe_free(addr);
    struct hs_ring r = hs_session.ring;
    r.seq = &hs_py_seq.next;
    struct hs_heap_free rec = {0, HS_PY_HEAP_ID, 0, (uint64_t)(uintptr_t)addr, hs_record_ns()};
    (void)hs_ok(hs_ring_write(&r, HS_REC_HEAP_FREE, &rec, sizeof rec, NULL, 0, 1));
  }
  hs_session_leave();
  hs_guard_leave(t, was);
}

void hs_record_py_free_slow(void *addr) {
  record_free_slow(addr, HS_PY_HEAP_ID);
}

void hs_record_free_slow(void *addr) {
  record_free_slow(addr, HS_MALLOC_HEAP_ID);
}

/* The free hook's cold half, whole here so that the free of a sampled
 * address is one call deep (not three: free_checked in hooks.c, then this
 * file's slow path, then the address set, each with its frame): the arena
 * (pinned in the filter, real.c) is never given to the real free; the rest
 * is recorded, then freed by a tail call. */
void hs_free_checked(void *p) {
  if (hs_arena_owns(p))
    return;
  record_free_slow(p, HS_MALLOC_HEAP_ID);
  HS_REAL(free)(p);
}


void hs_record_forked(void) { thread_tid = 0; }

void hs_record_reset(void) {
  hs_addrset_reset();
  py_heap_announced = 0;
  memset(stack_memo, 0, sizeof stack_memo);
  memset(native_checked, 0, sizeof native_checked);
  memset(code_memo, 0, sizeof code_memo);
}
