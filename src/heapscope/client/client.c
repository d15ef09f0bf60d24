/*
 * client.c: connection to the producer, and the slow paths of the hooks.
 *
 * Life of the client in one process:
 *   - dormant when HEAPSCOPE_SOCKET is unset, or when anything in the
 *     handshake fails: every hook then passes straight through after one
 *     predictable branch (hs_enabled == 0). Nothing is ever printed, unless
 *     HEAPSCOPE_DEBUG=1 (one line per event, with write(2)).
 *   - active: sampled mallocs and the frees of sampled addresses are written
 *     to the shared ring. The socket stays open and silent: its EOF is how
 *     each side learns that the other is gone.
 *   - disabled, for good, after the first failure (producer gone, shutting
 *     down, record too big): a process-local flag turns every hook into a
 *     pass-through, and meta.client_state/client_error say why.
 *
 * Descriptors: the client keeps one, the socket, and programs close and
 * reuse descriptors they did not open (daemons: a close loop up to the
 * limit, closefrom(3), dup2 over low numbers). The socket is moved above
 * the numbers programs reuse (keep_high), pinned open so that closing the
 * descriptor does not end the connection (pin_socket), and never trusted
 * without checking its identity (hs_sock_is_ours: the fork child's close,
 * the ring wait's liveness check). libunwind's own pipe is taken away
 * altogether (unwind.c, tame_libunwind).
 *
 * Settings, read with secure_getenv (a setuid target ignores them):
 * HEAPSCOPE_SOCKET and HEAPSCOPE_TOKEN (wire.h), HEAPSCOPE_DEBUG=1, and two
 * for the tests: HEAPSCOPE_MAX_WAIT_MS (bound of a wait for ring space,
 * default 10000) and HEAPSCOPE_PIN_SOCKET=0 (no pin).
 *
 * fork(): the pthread_atfork child handler only clears hs_enabled (and
 * closes the child's copy of the socket, so a long-lived child does not hide
 * the parent's exit from the producer). It writes nothing to the shared
 * memory, which the parent keeps using, and touches no lock (another thread
 * of the parent may have held one at the fork). The child is simply not
 * profiled; if it execs, the preloaded library starts over and connects as a
 * new process. vfork()/posix_spawn() children share our memory and run only
 * until exec: they bypass atfork, may take the normal paths (recording
 * under the parent's name), and never wait on anything but the bounded
 * ring wait, so they cannot deadlock.
 */
#include "client.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include "real.h"
#include "inject.h"
#include "heaps.h"
#include "ring.h"
#include "modules.h"
#include "own.h"
#include "pyframes.h"
#include "pymem.h"
#include "stacks.h"
#include "unwind.h"
#include "wire.h"

HS_TLS struct hs_thread hs_thread_state;
/* This thread's kernel id for struct hs_malloc: asked of the kernel on the
 * thread's first sample, not on every one (0 = not asked yet). */
static HS_TLS uint32_t thread_tid;
int hs_enabled;
size_t hs_page_size = 4096;

static struct {
  struct hs_ring ring;
  uint64_t interval;
  uint64_t seed;
  uint32_t max_frames;
  int sock;
  uint64_t sock_dev, sock_ino; /* identity of sock (see keep_high) */
  pid_t pid;                   /* the process that connected */
  uint64_t start_maxrss;       /* ru_maxrss (KiB) when the session started (note_exit) */
  int debug;
  uint32_t threads; /* per-process thread index for sampler seeds */
} cl = {.sock = -1};

/* The process-wide sequence counter, starting at 1, on its own cache line:
 * every sampled malloc and every sent free bumps it. */
static struct {
  uint64_t next;
  char pad[56];
} seq_line __attribute__((aligned(64))) = {1, {0}};

/* ---- debug output (never stdio, never allocates) ---- */

void hs_debug(const char *msg, uint64_t value) {
  if (!cl.debug)
    return;
  int saved_errno = errno; /* the free path leaves errno to us (record_free_slow) */
  char line[160];
  size_t n = 0;
  static const char prefix[] = "heapscope: ";
  memcpy(line, prefix, sizeof prefix - 1);
  n = sizeof prefix - 1;
  size_t m = strnlen(msg, 100);
  memcpy(line + n, msg, m);
  n += m;
  if (value != UINT64_MAX) {
    char digits[24];
    int d = 0;
    do {
      digits[d++] = (char)('0' + value % 10);
      value /= 10;
    } while (value);
    line[n++] = ' ';
    while (d)
      line[n++] = digits[--d];
  }
  line[n++] = '\n';
  ssize_t w = write(2, line, n);
  (void)w;
  errno = saved_errno;
}

/* ---- disabling ---- */

static void disable(int error) {
  if (!__atomic_exchange_n(&hs_enabled, 0, __ATOMIC_RELAXED))
    return; /* already off (another thread got there first) */
  struct hs_ring_meta *m = cl.ring.meta;
  __atomic_store_n(&m->client_error, (uint32_t)error, __ATOMIC_RELAXED);
  __atomic_store_n(&m->client_state, HS_CLIENT_DISABLED, __ATOMIC_RELEASE);
  hs_debug("client disabled, error", (uint64_t)error);
}

/* Checks a status: a negative one disables the client. Returns 1 if the
 * caller may go on. */
static int ok(int rc) {
  if (rc < 0) {
    disable(-rc);
    return 0;
  }
  return 1;
}

/* ---- Python frames (docs/python-frames.md) ----
 *
 * When CPython was found with a known layout at start-up, every sampled
 * allocation also walks the calling thread's Python frames (hs_py_walk:
 * plain loads, no lock, no allocation, no GIL). Each frame goes into the
 * STACK record as (code key, instruction offset, flags); each code key is
 * sent once per process as an HS_REC_PYCODE with the code object's names
 * and raw line table (interned in the stack table, salted), and the
 * producer computes lines and splices the frames into the native stack. */

_Static_assert(sizeof(struct hs_py_frame) == sizeof(struct hs_pyframe), "python frame layouts");
_Static_assert(offsetof(struct hs_py_frame, lasti) == offsetof(struct hs_pyframe, lasti), "lasti");
_Static_assert(offsetof(struct hs_py_frame, flags) == offsetof(struct hs_pyframe, flags), "flags");

#define CODE_NAME_CAP 1024u
#define CODE_FILE_CAP 4096u
#define CODE_TABLE_CAP 65536u
#define CODE_SLOTS 4
#define CODE_KEY_SALT UINT64_C(0x5be0cd19137e2179) /* code keys share the stack table */

/* Scratch buffers for copying a code object out, taken with a CAS: no lock.
 * When all are busy a thread copies into a small buffer on its own stack
 * (the names or the table may then be cut; the record says so). */
struct code_slot {
  int busy;
  char buf[CODE_NAME_CAP + CODE_FILE_CAP + CODE_TABLE_CAP];
};
static struct code_slot *code_slots;
#define CODE_MEMO_SLOTS 4096u
static uint64_t code_memo[CODE_MEMO_SLOTS]; /* code keys sent this session (python_frames) */
#define STACK_MEMO_SLOTS 4096u
static uint64_t stack_memo[STACK_MEMO_SLOTS]; /* Python stack ids sent this session (sample) */
#define NATIVE_MEMO_SLOTS 1024u
static uint64_t native_checked[NATIVE_MEMO_SLOTS]; /* native parts whose pcs were checked (sample) */
static int py_on; /* CPython with a known layout: set before hs_enabled, or by late_install */
static int pymem_on; /* Python's MEM and OBJ domains are wrapped (pymem.c) */
static int py_forks_restart; /* CPython found: fork children are profiled (restart_in_child) */

static HS_MUST_CHECK int send_code(uint64_t code, uint64_t key) {
  struct hs_ring_meta *m = cl.ring.meta;
  struct code_slot *slot = NULL;
  for (int i = 0; code_slots != NULL && i < CODE_SLOTS && slot == NULL; i++) {
    int expected = 0;
    if (__atomic_compare_exchange_n(&code_slots[i].busy, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED))
      slot = &code_slots[i];
  }
  char small[256 + 512 + 2048];
  char *buf = slot ? slot->buf : small;
  uint64_t ncap = slot ? CODE_NAME_CAP : 256, fcap = slot ? CODE_FILE_CAP : 512;
  uint64_t tcap = slot ? CODE_TABLE_CAP : 2048;
  /* A record must stay well under half the ring (hs_ring_write). */
  uint64_t room = cl.ring.size / 4 - sizeof(struct hs_pycode) - 16;
  if (ncap > room / 4)
    ncap = room / 4;
  if (fcap > room / 4)
    fcap = room / 4;
  if (tcap > room / 2)
    tcap = room / 2;
  struct hs_py_code_info info;
  memset(&info, 0, sizeof info);
  info.name = buf;
  info.name_cap = (uint32_t)ncap;
  info.file = buf + ncap;
  info.file_cap = (uint32_t)fcap;
  info.table = (uint8_t *)buf + ncap + fcap;
  info.table_cap = (uint32_t)tcap;
  int rc = HS_OK;
  if (hs_py_code_info(code, &info) != 0) {
    __atomic_fetch_add(&m->python_codes_failed, 1, __ATOMIC_RELAXED);
  } else {
    memmove(buf + info.name_len, info.file, info.file_len);
    memmove(buf + info.name_len + info.file_len, info.table, info.table_len);
    struct hs_pycode rec = {key, info.first_line, (uint16_t)info.line_format,
                            (uint16_t)info.truncated, info.name_len, info.file_len,
                            info.table_len, 0};
    rc = hs_ring_write(&cl.ring, HS_REC_PYCODE, &rec, sizeof rec, buf,
                       (size_t)info.name_len + info.file_len + info.table_len, 0);
    if (rc == HS_OK)
      __atomic_fetch_add(&m->python_codes_sent, 1, __ATOMIC_RELAXED);
  }
  if (slot)
    __atomic_store_n(&slot->busy, 0, __ATOMIC_RELEASE);
  return rc < 0 ? rc : HS_OK;
}

/* Walks this thread's Python frames into py (with their code keys) and
 * sends the code objects not sent yet. Returns the number of frames, or -1
 * when the thread has no Python state (a native thread: the stack then has
 * no Python part), or a negative client error - 1. */
static int python_frames(struct hs_pyframe *py, uint32_t *why_out, uint64_t *hash) {
  struct hs_ring_meta *m = cl.ring.meta;
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
    int rc = send_code(codes[i], key);
    if (rc < 0)
      return rc - 1;
  }
  return n;
}

static HS_MUST_CHECK int send_python_info(void);
static HS_MUST_CHECK int announce_py_heap(void);

/* The wrappers of a late install (pymem.c), from a pending call on the main
 * thread, outside any hook: says so to the producer with a new PYINFO. */
static int pymem_late(int installed) {
  struct hs_thread *t = &hs_thread_state;
  int saved = t->guard;
  if (installed < 0) {
    if (!__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
      return 0;
    t->guard = 1; /* the ring wait may allocate */
    int live = ok(announce_py_heap());
    t->guard = saved;
    return live;
  }
  t->guard = 1; /* the ring wait may allocate */
  pymem_on = installed;
  if (installed && __atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    (void)ok(send_python_info());
  t->guard = saved;
  return 1;
}

/* ---- an interpreter loaded later (docs/python-frames.md) ----
 *
 * A program that dlopen()s a shared libpython after the start and then runs
 * Py_Initialize (an embedded interpreter): python_init found nothing. A
 * module scan that meets a libpython3 notes its dynamic symbol table
 * (modules.c); the next sampled allocation (at most once a millisecond)
 * looks up Py_IsInitialized and Py_AddPendingCall there without dlsym, and
 * once the interpreter is initialized queues late_install, which the main
 * thread runs between two bytecodes with the GIL held, outside any hook, as
 * CPython runs its own imports' dlopen and dlsym: there detection (dlsym),
 * the domain wrappers (pymem.c) and the frame walker go in. Nothing waits:
 * when the main thread never runs Python again, nothing is installed. A
 * queue that stays full is asked LATE_MAX_TRIES times, then given up. */
enum { LATE_WATCH = 0, LATE_BUSY = 1, LATE_OFF = 2 };
static int late_py;           /* LATE_*; OFF once CPython is found or given up */
static uint64_t late_last_ns; /* the last look (rate limit) */
static uint32_t late_tries;   /* failed Py_AddPendingCall */
static void *late_pin;        /* keeps libpython mapped while we point into it */
#define LATE_EVERY_NS 1000000u
#define LATE_MAX_TRIES 100u

typedef int (*late_add_fn)(int (*fn)(void *), void *arg);
static int late_install(void *arg);
static uint64_t coarse_ns(void);

/* Inside the loader's iteration (modules.c): libpython stays mapped. 0:
 * queued, 1: not initialized yet, -1: the queue is full, -2: no symbols. */
static int late_queue(hs_modules_lookup_fn lookup, void *arg) {
  (void)arg;
  int (*initialized)(void) = (int (*)(void))lookup("Py_IsInitialized");
  late_add_fn add = (late_add_fn)lookup("Py_AddPendingCall");
  if (!initialized || !add)
    return -2;
  if (!initialized())
    return 1;
  return add(late_install, NULL) == 0 ? 0 : -1;
}

/* From a sampled allocation: the guard is set, no client lock is held. */
static void late_python(void) {
  uint64_t now = coarse_ns();
  uint64_t last = __atomic_load_n(&late_last_ns, __ATOMIC_RELAXED);
  if (now - last < LATE_EVERY_NS ||
      !__atomic_compare_exchange_n(&late_last_ns, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return;
  int expected = LATE_WATCH;
  if (!__atomic_compare_exchange_n(&late_py, &expected, LATE_BUSY, 0, __ATOMIC_ACQUIRE,
                                   __ATOMIC_RELAXED))
    return;
  int rc = hs_modules_with_libpython(late_queue, NULL);
  if (rc == 0) {
    hs_debug("libpython loaded after the start: install queued", UINT64_MAX);
    return; /* stays BUSY: late_install ends it */
  }
  if (rc == 1 || (rc == -1 && ++late_tries < LATE_MAX_TRIES)) {
    __atomic_store_n(&late_py, LATE_WATCH, __ATOMIC_RELEASE);
    return;
  }
  __atomic_store_n(&late_py, LATE_OFF, __ATOMIC_RELEASE);
  hs_debug("libpython loaded after the start: not installed", UINT64_MAX);
}

/* The code objects' slots, once Python is found (at start or later); none
 * when the mapping fails (send_code then copies through a smaller buffer). */
static void map_code_slots(void) {
  void *mem = mmap(NULL, CODE_SLOTS * sizeof(struct code_slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  code_slots = mem == MAP_FAILED ? NULL : mem;
  hs_own_map(code_slots, CODE_SLOTS * sizeof(struct code_slot), HS_OWN_PRIVATE);
}

/* A pending call (main thread, GIL held, outside any hook). Returns 0. */
static int late_install(void *arg) {
  (void)arg;
  struct hs_thread *t = &hs_thread_state;
  int saved = t->guard;
  t->guard = 1; /* dlsym, the ring wait and mmap may allocate */
  if (__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE) && hs_py_state() == HS_PY_ABSENT) {
    const char *path = hs_modules_libpython_path();
    if (path && !late_pin)
      late_pin = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    int state = hs_py_detect();
    if (state != HS_PY_ABSENT) {
      py_forks_restart = 1;
      if (state == HS_PY_SUPPORTED && code_slots == NULL)
        map_code_slots();
      pymem_on = hs_pymem_install_now(pymem_late) == 1;
      /* The PYINFO (eval range, status) before the first Python stack. */
      if (ok(send_python_info()) && state == HS_PY_SUPPORTED)
        __atomic_store_n(&py_on, 1, __ATOMIC_RELEASE);
      hs_debug("libpython loaded after the start: python frames, allocators", (uint64_t)pymem_on);
    }
  }
  __atomic_store_n(&late_py, LATE_OFF, __ATOMIC_RELEASE);
  t->guard = saved;
  return 0;
}

/* Detection, at start-up (dlsym is not hook-safe); later, see above. */
static void python_init(void) {
  const char *as = secure_getenv("HEAPSCOPE_TEST_PY_HEXVERSION"); /* tests: an unknown layout */
  int state;
  if (as && *as)
    state = hs_py_detect_as(strtoul(as, NULL, 0), 0);
  else
    state = hs_py_detect();
  if (state != HS_PY_ABSENT) {
    pymem_on = hs_pymem_install(pymem_late) == 1;
    py_forks_restart = 1;
    __atomic_store_n(&late_py, LATE_OFF, __ATOMIC_RELAXED); /* found now: nothing to watch for */
  }
  if (state != HS_PY_SUPPORTED)
    return;
  map_code_slots();
  py_on = 1;
}

static HS_MUST_CHECK int send_python_info(void) {
  int state = hs_py_state();
  if (state == HS_PY_ABSENT)
    return HS_OK;
  const char *line = hs_py_status_line();
  struct hs_pyinfo info;
  memset(&info, 0, sizeof info);
  hs_py_eval_range(&info.eval_lo, &info.eval_hi);
  info.hexversion = hs_py_hexversion();
  info.state = (uint32_t)state;
  info.status_len = (uint32_t)strnlen(line, 200);
  info.pymem = (uint32_t)pymem_on;
  return hs_ring_write(&cl.ring, HS_REC_PYINFO, &info, sizeof info, line, info.status_len, 0);
}

/* ---- slow paths ---- */

static void thread_init(struct hs_thread *t) {
  uint32_t index = __atomic_fetch_add(&cl.threads, 1, __ATOMIC_RELAXED);
  hs_sampler_init(&t->sampler, cl.interval, hs_sampler_mix_seed(cl.seed, index));
  t->errno_at = &errno;
}

static uint64_t coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The sequence of Python's heap (HS_PY_HEAP_ID), from 1, its own line;
 * and whether this session announced that heap (announce_py_heap). */
static struct {
  uint64_t next;
  char pad[56];
} py_seq_line __attribute__((aligned(64))) = {1, {0}};
static int py_heap_announced;

/* The HEAP record of Python's heap, once per session, before the first
 * record of that heap: when CPython is found at the start, else before a
 * late install puts the wrappers in (pymem.c). Outside any hook. */
static HS_MUST_CHECK int announce_py_heap(void) {
  if (__atomic_load_n(&py_heap_announced, __ATOMIC_ACQUIRE))
    return HS_OK;
  struct hs_heap heap;
  memset(&heap, 0, sizeof heap);
  heap.interval = cl.interval; /* the malloc countdown's (client.h) */
  heap.heap_id = HS_PY_HEAP_ID;
  memcpy(heap.name, HS_PY_HEAP_NAME, sizeof HS_PY_HEAP_NAME);
  int rc = hs_ring_write(&cl.ring, HS_REC_HEAP, &heap, sizeof heap, NULL, 0, 0);
  if (rc == HS_OK)
    __atomic_store_n(&py_heap_announced, 1, __ATOMIC_RELEASE);
  return rc < 0 ? rc : HS_OK;
}

/* heap: 1 (libc.malloc, HS_REC_MALLOC) or HS_PY_HEAP_ID (HEAP_MALLOC).
 * Inlined, and the unwind with it (hs_unwind_here): each frame of ours
 * under unw_backtrace is one more step of its walk. */
static inline __attribute__((always_inline)) void sample(struct hs_thread *t, void *addr, size_t size,
                                                         uint64_t sample_size, uint32_t heap) {
  struct hs_ring_meta *m = cl.ring.meta;
  /* Our own frames, then pcs, then (with Python frames) struct hs_pystack
   * and the frames: the tail of the STACK record in one piece, unwound in
   * place (no copy). */
  uint64_t buf[HS_UNWIND_SLACK + HS_MAX_FRAMES + 1 + 2 * HS_MAX_PYFRAMES];
  int truncated = 0;
  uint32_t depth, first = 0;
  /* Unwind time, measured on 1 unwind in 64 and scaled: clock_gettime on
   * every sample would be a visible part of the cost. */
  if ((t->unwinds++ & 63) == 0) {
    uint64_t t0 = hs_now_ns();
    depth = hs_unwind_here(buf, cl.max_frames, &truncated, &first);
    __atomic_fetch_add(&m->unwind_ns, (hs_now_ns() - t0) * 64, __ATOMIC_RELAXED);
  } else {
    depth = hs_unwind_here(buf, cl.max_frames, &truncated, &first);
  }
  uint64_t *tail = buf + first;
  uint64_t *pcs = tail;
  if (depth == 0)
    __atomic_fetch_add(&m->unwinding_errors, 1, __ATOMIC_RELAXED);
  if (truncated)
    __atomic_fetch_add(&m->truncated_stacks, 1, __ATOMIC_RELAXED);

  uint64_t id = hs_stack_id(pcs, depth), native_id = id;
  size_t py_bytes = 0;
  if (__atomic_load_n(&py_on, __ATOMIC_ACQUIRE)) {
    struct hs_pyframe *py = (struct hs_pyframe *)(tail + depth + 1);
    uint32_t why = 0;
    uint64_t part = 0;
    int n = python_frames(py, &why, &part);
    if (n < -1) {
      (void)ok(n + 1);
      return;
    }
    if (n >= 0) {
      struct hs_pystack ps = {(uint32_t)n, why};
      memcpy(tail + depth, &ps, sizeof ps);
      py_bytes = sizeof ps + (size_t)n * sizeof(struct hs_pyframe);
      id = hs_stack_id_py(id, (uint32_t)n, part);
    }
  }
  if (!ok(hs_modules_poll(&cl.ring)))
    return;
  /* Python stacks: a memo of ids known to be sent, as code_memo, saves the
   * probe of the big table (a cache and TLB miss) when a stack repeats. */
  uint64_t *memo = py_bytes ? &stack_memo[id & (STACK_MEMO_SLOTS - 1)] : NULL;
  enum hs_intern in = HS_STACK_KNOWN;
  if (!memo || __atomic_load_n(memo, __ATOMIC_RELAXED) != id) {
    in = hs_stacks_intern(id);
    if (memo && in == HS_STACK_KNOWN)
      __atomic_store_n(memo, id, __ATOMIC_RELAXED);
  }
  if (in != HS_STACK_KNOWN) {
    if (in == HS_STACK_FULL)
      __atomic_fetch_add(&m->stack_table_full, 1, __ATOMIC_RELAXED);
    /* A new Python part over a native part checked lately (objects built
     * down a recursion: every path is a stack of its own) needs no check:
     * its pcs were covered then and still are (modules are never dropped);
     * a rescan that check left pending is done at the next one or at exit. */
    uint64_t *checked = py_bytes ? &native_checked[native_id & (NATIVE_MEMO_SLOTS - 1)] : NULL;
    if (!checked || __atomic_load_n(checked, __ATOMIC_RELAXED) != native_id) {
      if (!ok(hs_modules_check(&cl.ring, pcs, depth)))
        return;
      if (checked)
        __atomic_store_n(checked, native_id, __ATOMIC_RELAXED);
    }
    struct hs_stack st = {id, depth,
                          (truncated ? HS_STACK_TRUNCATED : 0) | (py_bytes ? HS_STACK_PYTHON : 0)};
    if (!ok(hs_ring_write(&cl.ring, HS_REC_STACK, &st, sizeof st, tail,
                          depth * sizeof(uint64_t) + py_bytes, 0)))
      return;
  }
  if (heap == HS_PY_HEAP_ID) {
    if (!__atomic_load_n(&py_heap_announced, __ATOMIC_ACQUIRE))
      return; /* unannounced (its HEAP record was dropped): not booked, nor its free */
    struct hs_ring r = cl.ring;
    r.seq = &py_seq_line.next;
    struct hs_heap_malloc hrec = {0, HS_PY_HEAP_ID, 0, (uint64_t)(uintptr_t)addr, sample_size, size,
                                  id, coarse_ns()};
    int rc = hs_ring_write(&r, HS_REC_HEAP_MALLOC, &hrec, sizeof hrec, NULL, 0, 1);
    if (!ok(rc) || rc == HS_DROPPED)
      return;
    if (hs_addrset_insert((const void *)((uintptr_t)addr ^ HS_PY_HEAP_KEY)) != HS_OK)
      __atomic_fetch_add(&m->addr_table_full, 1, __ATOMIC_RELAXED);
    return;
  }
  if (HS_UNLIKELY(thread_tid == 0))
    thread_tid = (uint32_t)syscall(SYS_gettid);
  uint64_t ts = coarse_ns();
  /* Built in the ring where it fits at once (hs_ring_reserve): no copy. */
  const uint64_t rec_size = HS_ALIGN8(8 + sizeof(struct hs_malloc));
  int single;
  unsigned char *dst;
  if (HS_LIKELY(hs_ring_reserve(&cl.ring, rec_size, &dst, &single))) {
    struct hs_malloc *in = (struct hs_malloc *)(void *)(dst + 8);
    in->addr = (uint64_t)(uintptr_t)addr;
    in->sample_size = sample_size;
    in->alloc_size = size;
    in->stack_id = id;
    in->ts = ts;
    in->tid = thread_tid;
    in->reserved = 0;
    hs_ring_commit(dst, rec_size, HS_REC_MALLOC, cl.ring.seq, single);
  } else {
    struct hs_malloc rec = {0, (uint64_t)(uintptr_t)addr, sample_size, size, id, ts, thread_tid, 0};
    int rc = hs_ring_write_slow(&cl.ring, HS_REC_MALLOC, &rec, sizeof rec, NULL, 0, 1);
    if (!ok(rc) || rc == HS_DROPPED)
      return; /* the producer never hears of addr: neither should it of its free */
  }
  /* Nobody can free addr before we return it, so adding it after the record
   * is written is early enough. */
  if (hs_addrset_insert(addr) != HS_OK)
    __atomic_fetch_add(&m->addr_table_full, 1, __ATOMIC_RELAXED);
}

static inline __attribute__((always_inline)) void *record_alloc_slow(void *addr, size_t size,
                                                                  uint32_t heap) {
  struct hs_thread *t = &hs_thread_state;
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    return addr;
  if (t->sampler.interval == 0)
    thread_init(t);
  uint64_t sample_size = hs_sampler_sample(&t->sampler, size);
  /* The guard is looked at here, after the countdown moved, not in the
   * fast path (client.h, hs_alloc_unrecorded): the client's own allocation
   * (or one of a signal handler inside the client) is not recorded. */
  if (sample_size == 0 || addr == NULL || t->guard)
    return addr;
  int *err = t->errno_at; /* set with the sampler, above */
  int saved_errno = *err;
  /* Guard: unwinding, the loader and the ring wait may allocate. */
  t->guard = 1;
  sample(t, addr, size, sample_size, heap);
  if (HS_UNLIKELY(__atomic_load_n(&late_py, __ATOMIC_RELAXED) == LATE_WATCH) &&
      hs_modules_libpython_seen())
    late_python();
  t->guard = 0;
  *err = saved_errno;
  return addr;
}

void *hs_record_alloc_slow(void *addr, size_t size) {
  return record_alloc_slow(addr, size, 1);
}

void hs_record_py_alloc_slow(void *addr, size_t size) {
  (void)record_alloc_slow(addr, size, HS_PY_HEAP_ID);
}

/* heap: 1 (libc.malloc, HS_REC_FREE) or HS_PY_HEAP_ID (HEAP_FREE, its own
 * sequence and address key). Inlined with a constant heap. */
static inline __attribute__((always_inline)) void record_free_slow(void *addr, uint32_t heap) {
  struct hs_thread *t = &hs_thread_state;
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_RELAXED) || addr == NULL)
    return;
  if (t->guard) /* the client's own free (see common.h) */
    return;
  /* Guard: a blocking ring wait calls nanosleep/recv; keep any allocation
   * they might do out of the client. errno is not saved here: nothing on
   * this path sets it but the ring wait (hs_ring_write_slow) and the debug
   * line of a disable (hs_debug), which keep it themselves; the address
   * set's writers make no system call that can fail (addrset.c). */
  t->guard = 1;
  if (heap == 1) {
    if (hs_addrset_remove(addr)) {
      struct hs_free rec = {0, (uint64_t)(uintptr_t)addr};
      (void)ok(hs_ring_write(&cl.ring, HS_REC_FREE, &rec, sizeof rec, NULL, 0, 1));
    }
  } else if (hs_addrset_remove((const void *)((uintptr_t)addr ^ HS_PY_HEAP_KEY))) {
    struct hs_ring r = cl.ring;
    r.seq = &py_seq_line.next;
    struct hs_heap_free rec = {0, HS_PY_HEAP_ID, 0, (uint64_t)(uintptr_t)addr};
    (void)ok(hs_ring_write(&r, HS_REC_HEAP_FREE, &rec, sizeof rec, NULL, 0, 1));
  }
  t->guard = 0;
}

void hs_record_py_free_slow(void *addr) {
  record_free_slow(addr, HS_PY_HEAP_ID);
}

void hs_record_free_slow(void *addr) {
  record_free_slow(addr, 1);
}

/* The free hook's cold half, whole here so that the free of a sampled
 * address is one call deep (issue 13: free_checked in hooks.c, then this
 * file's slow path, then the address set, each with its frame): the arena
 * (pinned in the filter, real.c) is never given to the real free; the rest
 * is recorded, then freed by a tail call. */
void hs_free_checked(void *p) {
  if (hs_arena_owns(p))
    return;
  record_free_slow(p, 1);
  HS_REAL(free)(p);
}

/* ---- handshake ---- */

/* Bound of one wait for ring space in blocking mode: the producer drains
 * the ring continuously, so a wait this long means it stopped reading. 10 s
 * by default; HEAPSCOPE_MAX_WAIT_MS overrides it (the tests use a short
 * one). */
static uint64_t max_wait_ns(void) {
  uint64_t ms = 10000;
  const char *s = secure_getenv("HEAPSCOPE_MAX_WAIT_MS");
  if (s && *s) {
    uint64_t v = 0;
    int digits = 0;
    for (; *s >= '0' && *s <= '9' && digits < 9; s++, digits++)
      v = v * 10 + (uint64_t)(*s - '0');
    if (*s == '\0' && v > 0)
      ms = v;
  }
  return ms * 1000000u;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static HS_MUST_CHECK int parse_token(const char *s, uint8_t *out) {
  if (!s || strlen(s) != 2 * HS_TOKEN_SIZE)
    return -1;
  for (int i = 0; i < HS_TOKEN_SIZE; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

static HS_MUST_CHECK int send_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Receives the config and the memfd that comes with its first bytes. */
static HS_MUST_CHECK int recv_config(int fd, struct hs_config *cfg, int *memfd) {
  char *p = (char *)cfg;
  size_t got = 0;
  *memfd = -1;
  while (got < sizeof *cfg) {
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {p + got, sizeof *cfg - got};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        continue;
      size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      int fds[4];
      memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
      for (size_t i = 0; i < nfds; i++) {
        if (*memfd < 0)
          *memfd = fds[i];
        else
          close(fds[i]); /* unexpected extra descriptors */
      }
    }
  }
  if (got < sizeof *cfg) {
    if (*memfd >= 0)
      close(*memfd);
    *memfd = -1;
    return -1;
  }
  return 0;
}

/* Moves fd out of the way of the program: programs reuse the lowest free
 * numbers, and daemons close everything they did not open, commonly with a
 * loop up to the soft RLIMIT_NOFILE (sysconf(_SC_OPEN_MAX)). When the hard
 * limit allows, the socket goes just above the soft limit (raised for the
 * one F_DUPFD_CLOEXEC, then put back: a descriptor keeps working above the
 * limit), where neither such a loop nor the program's own opens reach it;
 * else just below it. closefrom()/close_range() still close it: the
 * identity check (hs_sock_is_ours) notices that, and the client stops.
 * Returns the new descriptor (the old one is closed), or fd unchanged. */
static int keep_high(int fd) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < 64)
    return fd;
  int moved = -1;
  rlim_t soft = rl.rlim_cur;
  if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > soft + 16) {
    struct rlimit raised = {soft + 16, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      moved = fcntl(fd, F_DUPFD_CLOEXEC, (int)soft);
      (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  if (moved < 0)
    moved = fcntl(fd, F_DUPFD_CLOEXEC, (int)(soft - soft / 8));
  if (moved < 0)
    return fd;
  close(fd);
  return moved;
}

/* Keeps the socket open even after the program closed every descriptor
 * (closefrom(3), a close loop up to a limit the socket could not be kept
 * above): the producer takes the socket's EOF for the process's exit, so a
 * socket closed by the program would end its profile early. The pin is an
 * io_uring with the socket as its one registered file: the ring's mapping
 * holds the io_uring, which holds the socket, whatever happens to the
 * descriptors of either. Nothing unmaps it: it goes, and the socket with it,
 * when the address space does (exit, exec), which is exactly the EOF the
 * producer waits for. MADV_DONTFORK keeps it out of fork children, which
 * must not hold their parent's socket open. Returns 1 when pinned; 0 where
 * io_uring is missing or forbidden (kernel.io_uring_disabled), or under a
 * seccomp filter (seccomp_maybe):
 * then a lost socket is detected (hs_sock_is_ours) rather than survived. */
/* 1 unless /proc/self/status says the process runs under no seccomp
 * filter. A filter set up before us (a container, a service manager) may
 * kill on a system call it does not know, and io_uring is a common one to
 * leave out. Plain open/read: no stdio, no allocation. */
static int seccomp_maybe(void) {
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 1;
  buf[n] = '\0';
  const char *line = strstr(buf, "\nSeccomp:");
  if (!line)
    return 1;
  line += strlen("\nSeccomp:");
  while (*line == ' ' || *line == '\t')
    line++;
  return *line != '0';
}

static int pin_socket(int fd) {
#ifdef SYS_io_uring_setup
  const char *pin = secure_getenv("HEAPSCOPE_PIN_SOCKET");
  if (pin && strcmp(pin, "0") == 0)
    return 0; /* the tests' way to take the detection path */
  if (seccomp_maybe())
    return 0;
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  int ring = (int)syscall(SYS_io_uring_setup, 1, &p);
  if (ring < 0)
    return 0;
  size_t len = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING);
  int fds[1] = {fd};
  int ok = m != MAP_FAILED && madvise(m, len, MADV_DONTFORK) == 0 &&
           syscall(SYS_io_uring_register, ring, IORING_REGISTER_FILES, fds, 1) == 0;
  if (!ok && m != MAP_FAILED)
    munmap(m, len);
  close(ring);
  return ok;
#else
  (void)fd;
  return 0;
#endif
}

/* Connects and maps the ring. Returns 0 when profiling can start. */
static HS_MUST_CHECK int connect_producer(const char *path, const char *token,
                                          struct hs_config *cfg) {
  struct hs_hello hello;
  memset(&hello, 0, sizeof hello);
  if (parse_token(token, hello.token) != 0) {
    hs_debug("bad or missing " HS_ENV_TOKEN, UINT64_MAX);
    return -1;
  }
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t plen = strlen(path);
  if (plen == 0 || plen >= sizeof sa.sun_path) {
    hs_debug("socket path too long", plen);
    return -1;
  }
  memcpy(sa.sun_path, path, plen);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct timeval tv = {10, 0};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
      connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    hs_debug("cannot connect, errno", (uint64_t)errno);
    close(fd);
    return -1;
  }
  hello.magic = HS_WIRE_MAGIC;
  hello.version = HS_WIRE_VERSION;
  hello.pid = (uint32_t)getpid();
  hello.ppid = (uint32_t)getppid();
  int memfd = -1;
  if (send_all(fd, &hello, sizeof hello) != 0 || recv_config(fd, cfg, &memfd) != 0) {
    hs_debug("handshake failed, errno", (uint64_t)errno);
    close(fd);
    return -1;
  }
  if (cfg->magic != HS_WIRE_MAGIC || cfg->version != HS_WIRE_VERSION ||
      cfg->status != HS_STATUS_OK || memfd < 0 || cfg->interval < 1 ||
      cfg->ring_size < HS_RING_MIN_SIZE || (cfg->ring_size & (cfg->ring_size - 1)) ||
      cfg->ring_size > HS_RING_MAX_SIZE || cfg->unwinder > HS_UNWINDER_NONE) {
    hs_debug("rejected by the producer, status", cfg->status);
    if (memfd >= 0)
      close(memfd);
    close(fd);
    return -1;
  }
  size_t len = HS_META_SIZE + cfg->ring_size;
  void *shm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  close(memfd);
  if (shm == MAP_FAILED) {
    hs_debug("cannot map the ring, errno", (uint64_t)errno);
    close(fd);
    return -1;
  }
  struct hs_ring_meta *m = shm;
  if (m->magic != HS_WIRE_MAGIC || m->version != HS_WIRE_VERSION ||
      m->ring_size != cfg->ring_size) {
    hs_debug("bad ring header", UINT64_MAX);
    munmap(shm, len);
    close(fd);
    return -1;
  }
  fd = keep_high(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    munmap(shm, len);
    close(fd);
    return -1;
  }
  cl.sock = fd;
  cl.pid = getpid();
  cl.sock_dev = (uint64_t)st.st_dev;
  cl.sock_ino = (uint64_t)st.st_ino;
  cl.ring.sock_dev = cl.sock_dev;
  cl.ring.sock_ino = cl.sock_ino;
  cl.ring.sock_pinned = pin_socket(fd);
  hs_debug("socket descriptor", (uint64_t)fd);
  hs_debug("socket pinned", (uint64_t)cl.ring.sock_pinned);
  cl.ring.max_wait_ns = max_wait_ns();
  hs_own_map(shm, len, HS_OWN_SHARED);
  cl.ring.meta = m;
  cl.ring.data = (unsigned char *)shm + HS_META_SIZE;
  cl.ring.size = cfg->ring_size;
  cl.ring.block = (cfg->flags & HS_CFG_BLOCK_CLIENT) != 0;
  cl.ring.sock = fd;
  cl.ring.seq = &seq_line.next;
  return 0;
}

static int restart_in_child(void);

static void atfork_child(void) {
  /* See the top of this file: local flag only, no shared writes, no locks. */
  int was = __atomic_exchange_n(&hs_enabled, 0, __ATOMIC_RELAXED);
  thread_tid = 0; /* the child's thread has an id of its own */
  /* Only our socket: the program may have closed it and reused the slot. */
  if (cl.sock >= 0 && hs_sock_is_ours(cl.sock, cl.sock_dev, cl.sock_ino))
    close(cl.sock);
  cl.sock = -1;
  /* A Python program's fork child runs Python (a multiprocessing worker):
   * it becomes a process of its own in the session (restart_in_child). */
  if (was && py_forks_restart)
    (void)restart_in_child();
}

static void fail_start(struct hs_ring_meta *m, int error) {
  __atomic_store_n(&m->client_error, (uint32_t)error, __ATOMIC_RELAXED);
  __atomic_store_n(&m->client_state, HS_CLIENT_DISABLED, __ATOMIC_RELEASE);
  hs_debug("cannot start, error", (uint64_t)error);
}

/* The session's socket path and token, kept for a fork child's restart. */
static char saved_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char saved_token[2 * HS_TOKEN_SIZE + 1];

/* Announces the heap, Python and the loaded objects, then turns sampling
 * on. Returns 0 when profiling runs. */
static int announce(const struct hs_config *cfg) {
  struct hs_ring_meta *m = cl.ring.meta;
  struct hs_heap heap;
  memset(&heap, 0, sizeof heap);
  heap.interval = cfg->interval;
  heap.heap_id = HS_MALLOC_HEAP_ID;
  memcpy(heap.name, HS_MALLOC_HEAP_NAME, sizeof HS_MALLOC_HEAP_NAME);
  int rc = hs_ring_write(&cl.ring, HS_REC_HEAP, &heap, sizeof heap, NULL, 0, 0);
  if (rc >= 0 && pymem_on)
    rc = announce_py_heap();
  if (rc >= 0)
    rc = send_python_info();
  if (rc >= 0)
    rc = hs_modules_scan(&cl.ring);
  if (rc < 0) {
    fail_start(m, -rc);
    return -1;
  }
  __atomic_store_n(&m->client_state, HS_CLIENT_ACTIVE, __ATOMIC_RELAXED);
  /* Release: a thread that sees hs_enabled (acquire in the slow paths) sees
   * the ring and the tables set up. */
  __atomic_store_n(&hs_enabled, 1, __ATOMIC_RELEASE);
  return 0;
}

/* Connects to the producer at path and starts profiling. Returns 0 when
 * profiling runs, -1 when the client stays dormant. */
static int start(const char *path, const char *token) {
  struct hs_config cfg;
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    cl.start_maxrss = (uint64_t)ru.ru_maxrss;
  if (connect_producer(path, token, &cfg) != 0)
    return -1;
  if (strlen(path) < sizeof saved_path && strlen(token) < sizeof saved_token) {
    memcpy(saved_path, path, strlen(path) + 1);
    memcpy(saved_token, token, strlen(token) + 1);
  }
  cl.interval = cfg.interval;
  cl.seed = cfg.seed;
  cl.max_frames = cfg.max_frames == 0 || cfg.max_frames > HS_MAX_FRAMES ? HS_MAX_FRAMES
                                                                      : cfg.max_frames;
  struct hs_ring_meta *m = cl.ring.meta;
  if (hs_stacks_init() != HS_OK)
    hs_debug("no stack table; stacks are sent every time", UINT64_MAX);
  int rc = hs_modules_init();
  uint32_t unwinder = hs_unwind_init(cfg.unwinder);
  python_init();
  __atomic_store_n(&m->unwinder, unwinder, __ATOMIC_RELAXED);
  if (rc != HS_OK || pthread_atfork(NULL, NULL, atfork_child) != 0) {
    fail_start(m, HS_ERR_OUT_OF_MEMORY);
    return -1;
  }
  if (announce(&cfg) != 0)
    return -1;
  hs_debug("profiling, unwinder", unwinder);
  return 0;
}

/* In the child of a fork (from the atfork handler, so one thread, with
 * malloc's and the loader's locks reset by glibc): a session of its own.
 * Everything the parent's session left here is dropped, not touched: the
 * ring (the parent's, shared: unmapped), the stack table and the sampled
 * addresses (another thread of the parent may have been inside them; both
 * belong to the parent's session), the code-copy slots, the sequence. The
 * unwinder, the Python layout and the wrapped allocator domains carry over.
 * Bounded as the constructor's start: the socket has 10 s timeouts. */
static int restart_in_child(void) {
  struct hs_thread *t = &hs_thread_state;
  int saved = t->guard;
  t->guard = 1;
  int rc = -1;
  uint32_t unwinder = cl.ring.meta ? cl.ring.meta->unwinder : 0;
  if (cl.ring.meta) {
    hs_own_unmap(cl.ring.meta);
    (void)munmap(cl.ring.meta, HS_META_SIZE + cl.ring.size);
  }
  memset(&cl.ring, 0, sizeof cl.ring);
  hs_addrset_reset();
  seq_line.next = 1;
  py_seq_line.next = 1;
  py_heap_announced = 0;
  cl.threads = 0;
  for (int i = 0; code_slots != NULL && i < CODE_SLOTS; i++)
    code_slots[i].busy = 0;
  memset(code_memo, 0, sizeof code_memo);
  memset(stack_memo, 0, sizeof stack_memo);
  memset(native_checked, 0, sizeof native_checked);
  hs_py_memo_reset(); /* its frames' code objects were sent to the parent's session */
  struct hs_config cfg;
  if (saved_path[0] && hs_stacks_init() == HS_OK && hs_modules_init() == HS_OK &&
      connect_producer(saved_path, saved_token, &cfg) == 0) {
    cl.interval = cfg.interval;
    cl.seed = cfg.seed;
    __atomic_store_n(&cl.ring.meta->unwinder, unwinder, __ATOMIC_RELAXED);
    hs_pymem_session(cl.interval); /* the wrappers' fast path: below this interval */
    thread_init(t);
    rc = announce(&cfg);
  }
  hs_debug("fork child restarted, status", (uint64_t)(rc == 0 ? 0 : 1));
  t->guard = saved;
  return rc;
}

/* Set by the first session start, in the constructor or by an attach: a
 * process is profiled by one session in its life (the interned stacks and
 * the address set belong to that session). */
static int session_taken;

/* The next _exit and _Exit after ours (the C library's): see end_process. */
typedef void (*exit_fn)(int);
static exit_fn next_exit, next_Exit;

__attribute__((constructor)) static void hs_client_init(void) {
  struct hs_thread *t = &hs_thread_state;
  (void)hs_real_resolve();
  /* Guard: dlsym allocates. */
  t->guard = 1;
  next_exit = (exit_fn)dlsym(RTLD_NEXT, "_exit");
  next_Exit = (exit_fn)dlsym(RTLD_NEXT, "_Exit");
  t->guard = 0;
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0)
    hs_page_size = (size_t)ps;
  const char *dbg = secure_getenv("HEAPSCOPE_DEBUG");
  cl.debug = dbg && dbg[0] == '1' && dbg[1] == '\0';
  const char *path = secure_getenv(HS_ENV_SOCKET);
  if (!path)
    return; /* dormant, or loaded by an attach that calls heapscope_attach */
  /* Guard: secure_getenv is safe, but the socket calls, dlopen(libunwind),
   * dl_iterate_phdr and the unwinder warm-up all allocate. hs_enabled is
   * still 0 here, so nothing can be sampled before the ring is ready. */
  t->guard = 1;
  if (start(path, secure_getenv(HS_ENV_TOKEN)) == 0)
    __atomic_store_n(&session_taken, 1, __ATOMIC_RELAXED);
  t->guard = 0;
}

/* Attach to a running process: `heapscope record -p PID` dlopen()s this
 * library into it through gdb, then calls this with the producer's socket
 * path and token (32 hex digits). The library was not preloaded, so its
 * malloc family interposes nothing: hs_inject_hooks() points the GOT
 * entries of every loaded object at our hooks. Allocations made before
 * this call are not tracked, and their frees pass through untracked.
 * Returns HS_ATTACH_OK, or why not (enum hs_attach_result in client.h). */
HS_EXPORT int heapscope_attach(const char *socket_path, const char *token) {
  if (__atomic_exchange_n(&session_taken, 1, __ATOMIC_ACQ_REL))
    return HS_ATTACH_BUSY;
  struct hs_thread *t = &hs_thread_state;
  int saved = t->guard;
  /* Guard: as in the constructor (socket, loader, unwinder warm-up). */
  t->guard = 1;
  int result = HS_ATTACH_OK;
  if (!socket_path || !token || start(socket_path, token) != 0)
    result = HS_ATTACH_NO_SESSION;
  else if (hs_inject_hooks() <= 0)
    result = HS_ATTACH_NO_HOOKS;
  t->guard = saved;
  return result;
}

/* The process's peak RSS at its last moment, and how much of what it holds
 * now is heapscope's own (own.h), for the producer (wire.h, exit_peak_rss
 * and own_rss): it polls VmHWM, which the kernel drops with the process, so
 * a peak in the last moments before the exit is seen only from here. Not
 * getrusage's ru_maxrss alone: Linux carries it over exec, so a program
 * started by a bigger one (a Python test runner, `record` itself) would
 * report its starter's peak; it serves only without /proc, when it grew
 * past its value at the start (then it is this image's own). */
static void note_exit(void) {
  /* Our session's meta only: not a fork child's that did not restart (the
   * meta is its parent's) nor a vfork child's (cl.pid is another). */
  struct hs_ring_meta *m = cl.ring.meta;
  if (!m || cl.pid != getpid())
    return;
  uint64_t peak = hs_own_peak_rss();
  struct rusage ru;
  if (peak == 0 && getrusage(RUSAGE_SELF, &ru) == 0 && (uint64_t)ru.ru_maxrss > cl.start_maxrss)
    peak = (uint64_t)ru.ru_maxrss * 1024;
  __atomic_store_n(&m->own_rss, hs_own_resident(), __ATOMIC_RELAXED);
  __atomic_store_n(&m->exit_peak_rss, peak, __ATOMIC_RELAXED);
}

/* _exit and _Exit end a process with no destructor (os._exit: every fork
 * child of multiprocessing; a program's own fast exit), so their exit
 * figures are noted here, then the next definition ends the process (the C
 * library's, or a sanitizer's, resolved at the start: dlsym allocates). */
static _Noreturn void end_process(exit_fn next, int status) {
  note_exit();
  if (next)
    next(status);
  for (;;)
    syscall(SYS_exit_group, status);
}

HS_EXPORT _Noreturn void _exit(int status) { end_process(next_exit, status); }
HS_EXPORT _Noreturn void _Exit(int status) { end_process(next_Exit, status); }

__attribute__((destructor)) static void hs_client_fini(void) {
  struct hs_thread *t = &hs_thread_state;
  int saved = t->guard;
  /* Guard: a last module rescan calls dl_iterate_phdr. */
  t->guard = 1;
  if (__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    (void)ok(hs_modules_flush(&cl.ring));
  /* Before the shutdown below, so the producer finds them when it sees the EOF. */
  note_exit();
  /* The pin (pin_socket) lets go of the socket only some time after the
   * process is gone (the kernel tears an io_uring down in a worker), so the
   * producer could learn of a normal exit after the parent did. Shut the
   * socket down here instead: the producer sees EOF now, as it would have
   * when exit closed the last descriptor. Ours only: not a vfork child's
   * exit (another pid, same socket) nor a descriptor the program reused.
   * This library is finalized last (preloaded: initialized first), after
   * the program's destructors and atexit handlers. */
  if (cl.sock >= 0 && cl.pid == getpid() && hs_sock_is_ours(cl.sock, cl.sock_dev, cl.sock_ino)) {
    /* Said first: an EOF from a client still ACTIVE means the program closed
     * our socket and runs on, and the producer follows it to its exit. */
    if (cl.ring.meta && __atomic_load_n(&cl.ring.meta->client_state, __ATOMIC_RELAXED) == HS_CLIENT_ACTIVE)
      __atomic_store_n(&cl.ring.meta->client_state, HS_CLIENT_EXITING, __ATOMIC_RELEASE);
    (void)shutdown(cl.sock, SHUT_RDWR);
  }
  t->guard = saved;
}

/* ---- what custom heaps (heaps.c) borrow ---- */

struct hs_ring *hs_client_ring(void) { return &cl.ring; }
uint64_t hs_client_interval(void) { return cl.interval; }
uint64_t hs_client_seed(void) { return cl.seed; }
uint32_t hs_client_max_frames(void) { return cl.max_frames; }
void hs_client_fail(int status) { (void)ok(status); }
