/*
 * session.c: the session, the client's top layer: its start (in the
 * constructor, or by an attach), Python found at the start or later, the
 * fork child's new session, the process's end. The hooks' slow paths are
 * record.c's, the connection connect.c's.
 *
 * Life of the client in one process:
 *   - dormant when HEAPSCOPE_SOCKET is unset, or when anything in the
 *     handshake fails: every hook then passes straight through after one
 *     predictable branch (hs_enabled == 0). Nothing is ever printed, unless
 *     HEAPSCOPE_DEBUG=1 (one line per event, with write(2)).
 *   - active: sampled mallocs and the frees of sampled addresses are written
 *     to the shared ring. The socket stays open and silent: its EOF is how
 *     each side learns that the other is gone.
 *   - disabled after the first failure (producer gone, shutting down at a
 *     detach, record too big): a process-local flag turns every hook into a
 *     pass-through, and meta.client_state/client_error say why. It lasts
 *     for the rest of the process, unless an attach starts a new session
 *     (start_again).
 *
 * The connection (the socket and its descriptor, the handshake, the ring)
 * is connect.c's.
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
#include "session.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "connect.h"
#include "inject.h"
#include "maps.h"
#include "modules.h"
#include "own.h"
#include "pyframes.h"
#include "pymem.h"
#include "pysend.h"
#include "real.h"
#include "record.h"
#include "stacks.h"
#include "state.h"
#include "unwind.h"
#include "wire.h"

/* The process's ru_maxrss (KiB) when the session started (note_exit). */
static uint64_t start_maxrss;

/* ---- Python (docs/python-frames.md) ---- */

static int pymem_on; /* Python's MEM and OBJ domains are wrapped (pymem.c) */
static int py_forks_restart; /* CPython found: fork children are profiled (restart_in_child) */
static void *late_pin;       /* keeps a libpython found later mapped while we point into it */

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
  return hs_ring_write(&hs_session.ring, HS_REC_PYINFO, &info, sizeof info, line, info.status_len, 0);
}

/* The wrappers of a late install (pymem.c), from a pending call on the main
 * thread, outside any hook: says so to the producer with a new PYINFO. */
static int pymem_late(int installed) {
  struct hs_thread *t = &hs_thread_state;
  if (installed < 0 && !__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    return 0;
  int was = hs_guard_enter(t); /* the ring wait may allocate */
  int live = 1;
  if (installed < 0) {
    live = hs_ok(hs_record_announce_py_heap());
  } else {
    pymem_on = installed;
    if (installed && __atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
      (void)hs_ok(send_python_info());
  }
  hs_guard_leave(t, was);
  return live;
}

/* A pending call (main thread, GIL held, outside any hook). Returns 0. */
static int late_install(void *arg) {
  (void)arg;
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t); /* dlsym, the ring wait and mmap may allocate */
  if (__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE) && hs_py_state() == HS_PY_ABSENT) {
    const char *path = hs_modules_libpython_path();
    if (path && !late_pin)
      late_pin = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    int state = hs_py_detect();
    if (state != HS_PY_ABSENT) {
      py_forks_restart = 1;
      if (state == HS_PY_SUPPORTED && !hs_py_code_slots_mapped())
        hs_py_map_code_slots();
      pymem_on = hs_pymem_install_now(pymem_late) == 1;
      /* The PYINFO (eval range, status) before the first Python stack. */
      if (hs_ok(send_python_info()) && state == HS_PY_SUPPORTED)
        __atomic_store_n(&hs_py_on, 1, __ATOMIC_RELEASE);
      hs_debug("libpython loaded after the start: python frames, allocators", (uint64_t)pymem_on);
    }
  }
  hs_py_late_stop();
  hs_guard_leave(t, was);
  return 0;
}

/* Detection, at start-up (dlsym is not hook-safe); later, see above. */
static void python_init(void) {
  hs_py_late_init(late_install); /* for an interpreter loaded later (pysend.c) */
  const char *as = secure_getenv("HEAPSCOPE_TEST_PY_HEXVERSION"); /* tests: an unknown layout */
  int state;
  if (as && *as)
    state = hs_py_detect_as(strtoul(as, NULL, 0), 0);
  else
    state = hs_py_detect();
  if (state != HS_PY_ABSENT) {
    pymem_on = hs_pymem_install(pymem_late) == 1;
    py_forks_restart = 1;
    hs_py_late_stop(); /* found now: nothing to watch for */
  }
  if (state != HS_PY_SUPPORTED)
    return;
  hs_py_map_code_slots();
  __atomic_store_n(&hs_py_on, 1, __ATOMIC_RELAXED);
}

/* ---- the session ---- */

static int restart_in_child(void);

static void atfork_child(void) {
  /* See the top of this file: local flag only, no shared writes, no locks. */
  int was = __atomic_exchange_n(&hs_enabled, 0, __ATOMIC_RELAXED);
  hs_record_forked(); /* the child's thread has an id of its own */
  /* Only our socket: the program may have closed it and reused the slot. */
  if (hs_conn.sock >= 0 && hs_sock_is_ours(hs_conn.sock, hs_conn.sock_dev, hs_conn.sock_ino))
    close(hs_conn.sock);
  hs_conn.sock = -1;
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

static void save_session(const char *path, const char *token) {
  if (strlen(path) < sizeof saved_path && strlen(token) < sizeof saved_token) {
    memcpy(saved_path, path, strlen(path) + 1);
    memcpy(saved_token, token, strlen(token) + 1);
  } else {
    saved_path[0] = '\0'; /* a fork child then stays dormant */
  }
}

/* Announces the heap, Python and the loaded objects, then turns sampling
 * on. Returns 0 when profiling runs. */
static int announce(const struct hs_config *cfg) {
  struct hs_ring_meta *m = hs_session.ring.meta;
  struct hs_heap heap;
  memset(&heap, 0, sizeof heap);
  heap.interval = cfg->interval;
  heap.heap_id = HS_MALLOC_HEAP_ID;
  memcpy(heap.name, HS_MALLOC_HEAP_NAME, sizeof HS_MALLOC_HEAP_NAME);
  int rc = hs_ring_write(&hs_session.ring, HS_REC_HEAP, &heap, sizeof heap, NULL, 0, 0);
  if (rc >= 0 && pymem_on)
    rc = hs_record_announce_py_heap();
  if (rc >= 0)
    rc = send_python_info();
  if (rc >= 0)
    rc = hs_modules_scan(&hs_session.ring);
  if (rc < 0) {
    fail_start(m, -rc);
    return -1;
  }
  hs_maps_session(cfg->flags);
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
    start_maxrss = (uint64_t)ru.ru_maxrss;
  if (hs_connect_producer(path, token, &cfg) != 0)
    return -1;
  save_session(path, token);
  hs_session.interval = cfg.interval;
  hs_session.seed = cfg.seed;
  hs_session.max_frames = cfg.max_frames == 0 || cfg.max_frames > HS_MAX_FRAMES ? HS_MAX_FRAMES
                                                                      : cfg.max_frames;
  hs_session.gen = 1;
  struct hs_ring_meta *m = hs_session.ring.meta;
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
  int was = hs_guard_enter(t);
  int rc = -1;
  uint32_t unwinder = hs_session.ring.meta ? hs_session.ring.meta->unwinder : 0;
  if (hs_session.ring.meta) {
    hs_own_unmap(hs_session.ring.meta);
    (void)munmap(hs_session.ring.meta, HS_META_SIZE + hs_session.ring.size);
  }
  memset(&hs_session.ring, 0, sizeof hs_session.ring);
  hs_record_reset(); /* the sampled addresses, the memos (code keys too), Python's heap's announcement */
  hs_malloc_seq.next = 1;
  hs_py_seq.next = 1;
  hs_session.threads = 0;
  hs_py_send_reset(); /* the code-copy slots */
  hs_py_memo_reset(); /* its frames' code objects were sent to the parent's session */
  struct hs_config cfg;
  if (saved_path[0] && hs_stacks_init() == HS_OK && hs_modules_init() == HS_OK &&
      hs_connect_producer(saved_path, saved_token, &cfg) == 0) {
    hs_session.interval = cfg.interval;
    hs_session.seed = cfg.seed;
    __atomic_store_n(&hs_session.ring.meta->unwinder, unwinder, __ATOMIC_RELAXED);
    hs_pymem_session(hs_session.interval); /* the wrappers' fast path: below this interval */
    hs_record_thread_init(t);
    rc = announce(&cfg);
  }
  hs_debug("fork child restarted, status", (uint64_t)(rc == 0 ? 0 : 1));
  hs_guard_leave(t, was);
  return rc;
}

/* Set by the first session start, in the constructor or by an attach. A
 * later attach starts another session once that one ended (start_again). */
static int session_taken;

/* Has the current session ended: the client is off, the producer asked it
 * to stop (a detach) or is gone (its end of the socket closed)? */
static int session_ended(void) {
  struct hs_ring_meta *m = hs_session.ring.meta;
  if (!m || !__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&m->shutting_down, __ATOMIC_ACQUIRE))
    return 1;
  int fd = hs_conn.sock;
  if (fd < 0 || !hs_sock_is_ours(fd, hs_conn.sock_dev, hs_conn.sock_ino))
    return 1;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Waits, bounded (2 s), until no thread is inside the ended session's slow
 * paths (state.h, hs_session_enter): with the client off, each of them is
 * on its way out (a ring write fails at once on a session that ended). */
static int wait_no_users(void) {
  for (int i = 0; i < 2000; i++) {
    /* A counter read as 0 after hs_enabled went 0 has no thread of the old
     * session left: one that enters now sees the client off and goes. */
    int users = 0;
    for (int k = 0; k < HS_USER_SLOTS && !users; k++)
      users = __atomic_load_n(&hs_session_users[k].n, __ATOMIC_SEQ_CST) != 0;
    if (!users)
      return 0;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

/* A new session in a process whose previous one ended (an attach after a
 * detach). As a fork child's restart, everything of the old session is
 * dropped: its ring and socket, the stack table, the sampled addresses (the
 * frees of blocks sampled before are not this session's), the memos and
 * the sequences; the unwinder, the Python layout and the wrapped allocator
 * domains carry over. Other threads run meanwhile: the client is turned off
 * first and the tables replaced only when no thread is inside them. Each
 * thread sets its sampler up again at its next slow path (hs_thread.gen).
 * Returns an enum hs_attach_result. */
static int start_again(const char *path, const char *token) {
  hs_disable(HS_ERR_SHUTTING_DOWN); /* no-op when already off */
  if (wait_no_users() != 0)
    return HS_ATTACH_DRAINING;
  uint32_t unwinder = hs_session.ring.meta ? hs_session.ring.meta->unwinder : 0;
  if (hs_conn.sock >= 0 && hs_sock_is_ours(hs_conn.sock, hs_conn.sock_dev, hs_conn.sock_ino))
    close(hs_conn.sock); /* a pinned socket stays open, with its io_uring, until the process ends */
  hs_conn.sock = -1;
  if (hs_session.ring.meta) {
    hs_own_unmap(hs_session.ring.meta);
    (void)munmap(hs_session.ring.meta, HS_META_SIZE + hs_session.ring.size);
  }
  memset(&hs_session.ring, 0, sizeof hs_session.ring);
  hs_record_reset();
  __atomic_store_n(&hs_malloc_seq.next, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&hs_py_seq.next, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&hs_session.threads, 0, __ATOMIC_RELAXED);
  hs_py_send_reset();
  hs_py_memo_reset();
  struct hs_config cfg;
  if (hs_connect_producer(path, token, &cfg) != 0)
    return HS_ATTACH_NO_SESSION;
  save_session(path, token); /* a fork child's restart joins this session, not the ended one */
  struct hs_ring_meta *m = hs_session.ring.meta;
  __atomic_store_n(&m->unwinder, unwinder, __ATOMIC_RELAXED);
  if (hs_stacks_init() != HS_OK || hs_modules_init() != HS_OK) {
    fail_start(m, HS_ERR_OUT_OF_MEMORY);
    return HS_ATTACH_NO_SESSION;
  }
  hs_session.interval = cfg.interval;
  hs_session.seed = cfg.seed;
  hs_session.max_frames = cfg.max_frames == 0 || cfg.max_frames > HS_MAX_FRAMES ? HS_MAX_FRAMES
                                                                      : cfg.max_frames;
  hs_pymem_session(hs_session.interval); /* the wrappers' fast path: below this interval */
  __atomic_add_fetch(&hs_session.gen, 1, __ATOMIC_RELAXED); /* before hs_enabled, released by announce */
  if (announce(&cfg) != 0)
    return HS_ATTACH_NO_SESSION;
  hs_debug("profiling again, session", hs_session.gen);
  return HS_ATTACH_OK;
}

/* The next _exit and _Exit after ours (the C library's): see end_process. */
typedef void (*exit_fn)(int);
static exit_fn next_exit, next_Exit;

__attribute__((constructor)) static void hs_client_init(void) {
  struct hs_thread *t = &hs_thread_state;
  (void)hs_real_resolve();
  int was = hs_guard_enter(t); /* dlsym allocates */
  next_exit = (exit_fn)dlsym(RTLD_NEXT, "_exit");
  next_Exit = (exit_fn)dlsym(RTLD_NEXT, "_Exit");
  hs_guard_leave(t, was);
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0)
    hs_page_size = (size_t)ps;
  const char *dbg = secure_getenv("HEAPSCOPE_DEBUG");
  hs_session.debug = dbg && dbg[0] == '1' && dbg[1] == '\0';
  const char *path = secure_getenv(HS_ENV_SOCKET);
  if (!path)
    return; /* dormant, or loaded by an attach that calls heapscope_attach */
  /* Guard: secure_getenv is safe, but the socket calls, dlopen(libunwind),
   * dl_iterate_phdr and the unwinder warm-up all allocate. hs_enabled is
   * still 0 here, so nothing can be sampled before the ring is ready. */
  was = hs_guard_enter(t);
  if (start(path, secure_getenv(HS_ENV_TOKEN)) == 0)
    __atomic_store_n(&session_taken, 1, __ATOMIC_RELAXED);
  hs_guard_leave(t, was);
}

/* Attach to a running process: `heapscope record -p PID` dlopen()s this
 * library into it through gdb, then calls this with the producer's socket
 * path and token (32 hex digits). The library was not preloaded, so its
 * malloc family interposes nothing: hs_inject_hooks() points the GOT
 * entries of every loaded object at our hooks. Allocations made before
 * this call are not tracked, and their frees pass through untracked.
 * Returns HS_ATTACH_OK, or why not (enum hs_attach_result in session.h). */
HS_EXPORT int heapscope_attach(const char *socket_path, const char *token) {
  if (!socket_path || !token)
    return HS_ATTACH_NO_SESSION;
  struct hs_thread *t = &hs_thread_state;
  int was = hs_guard_enter(t); /* as in the constructor (socket, loader, unwinder warm-up) */
  int result = HS_ATTACH_OK;
  if (__atomic_exchange_n(&session_taken, 1, __ATOMIC_ACQ_REL)) {
    /* The hooks are in place already (preloaded, or injected by the first
     * attach, and never taken out): only the session is new. */
    result = session_ended() ? start_again(socket_path, token) : HS_ATTACH_BUSY;
  } else if (start(socket_path, token) != 0) {
    result = HS_ATTACH_NO_SESSION;
  } else if (hs_inject_hooks() <= 0) {
    result = HS_ATTACH_NO_HOOKS;
  }
  hs_guard_leave(t, was);
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
   * meta is its parent's) nor a vfork child's (hs_conn.pid is another). */
  struct hs_ring_meta *m = hs_session.ring.meta;
  if (!m || hs_conn.pid != getpid())
    return;
  uint64_t peak = hs_own_peak_rss();
  struct rusage ru;
  if (peak == 0 && getrusage(RUSAGE_SELF, &ru) == 0 && (uint64_t)ru.ru_maxrss > start_maxrss)
    peak = (uint64_t)ru.ru_maxrss * 1024;
  __atomic_store_n(&m->own_rss, hs_own_resident(), __ATOMIC_RELAXED);
  __atomic_store_n(&m->exit_peak_rss, peak, __ATOMIC_RELAXED);
  __atomic_store_n(&m->exit_ts, hs_mono_ns(), __ATOMIC_RELAXED); /* the records' clock, as start_ts */
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
  int was = hs_guard_enter(t); /* a last module rescan calls dl_iterate_phdr */
  if (__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    (void)hs_ok(hs_modules_flush(&hs_session.ring));
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
  if (hs_conn.sock >= 0 && hs_conn.pid == getpid() &&
      hs_sock_is_ours(hs_conn.sock, hs_conn.sock_dev, hs_conn.sock_ino)) {
    /* Said first: an EOF from a client still ACTIVE means the program closed
     * our socket and runs on, and the producer follows it to its exit. */
    struct hs_ring_meta *m = hs_session.ring.meta;
    if (m && __atomic_load_n(&m->client_state, __ATOMIC_RELAXED) == HS_CLIENT_ACTIVE)
      __atomic_store_n(&m->client_state, HS_CLIENT_EXITING, __ATOMIC_RELEASE);
    (void)shutdown(hs_conn.sock, SHUT_RDWR);
  }
  hs_guard_leave(t, was);
}
