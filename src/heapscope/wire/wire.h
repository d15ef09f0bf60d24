/*
 * wire.h: the one definition of the protocol between the client (inside the
 * target) and the producer (the `heapscope record` process).
 *
 * The Python mirror is heapscope/wire/codec.py; tests/unit/wire checks every
 * size and offset below against it, so change both together and bump
 * HS_WIRE_VERSION.
 *
 * 1. Handshake, over an AF_UNIX SOCK_STREAM socket at $HEAPSCOPE_SOCKET.
 *
 *      client                                   producer
 *      connect() ----------------------------->  accept()
 *      hs_hello{magic, version, pid, token} -->  checks magic, version, token
 *                                                and pid == SO_PEERCRED pid
 *                 <----------------------------  hs_config{status, interval, ...}
 *                                                + SCM_RIGHTS [ring memfd]
 *      mmap(memfd)                                 (only when status == OK)
 *
 *    The socket then stays open and carries nothing: EOF tells the producer
 *    that the process is gone, and tells the client that the producer is.
 *    With status NOT_TARGETED (or REJECTED) no memfd comes, the client
 *    closes the socket and stays dormant.
 *
 *    Attach to a running process (record -p): the producer loads the client
 *    with dlopen() through gdb and calls the exported
 *    heapscope_attach(socket, token), which does the same handshake with
 *    those two strings instead of the environment (see client/session.c).
 *
 * 2. Shared memory: one per process, created by the producer.
 *
 *      [ hs_ring_meta, padded to HS_META_SIZE ][ data: ring_size bytes ]
 *
 *    ring_size is a power of two. Positions are free-running u64 byte counts;
 *    the byte for position p lives at data[p & (ring_size - 1)].
 *
 * 3. Records. Each record is an 8-byte header followed by a fixed struct and
 *    an optional variable tail, the whole padded to a multiple of 8:
 *
 *      header (u64, little endian) = size | (type << 32)
 *        size: bytes of the whole record including the header (multiple of 8)
 *        type: enum hs_record_type
 *
 *    A record never wraps: a writer that would cross the end of the data area
 *    first fills the rest with one HS_REC_PAD record.
 *
 *    Writers (any thread of the target) reserve space with a CAS on
 *    write_pos, write the body, and publish by storing the header last with
 *    release order. A zero header means "reserved, not yet written": the
 *    reader stops there, which keeps the ring FIFO. The reader zeroes every
 *    byte it consumed before it advances read_pos, so a fresh reservation
 *    always starts on zeroes.
 *
 *    A writer that dies between reserving and publishing (a thread killed
 *    mid-record) leaves a zero header that is never filled: the reader
 *    stops there for good, and records after it are lost. The producer
 *    seals the memfd (no shrink or grow) before handing it over.
 *
 *    Sequence numbers: one gapless counter per process, taken by every
 *    sampled malloc (after the real allocator returned) and every free that
 *    is sent (before the real free runs). The producer applies MALLOC and
 *    FREE in sequence order, so a free that lands in the ring before its
 *    malloc, or an address reused by another thread, is booked right.
 *
 *    Only frees of sampled addresses are sent: the client keeps the set of
 *    live sampled addresses.
 */
#ifndef HEAPSCOPE_WIRE_H
#define HEAPSCOPE_WIRE_H

#include <stdint.h>

#define HS_WIRE_MAGIC 0x31575350414548ull /* "HEAPSW1" little endian */
#define HS_WIRE_VERSION 9u
#define HS_TOKEN_SIZE 16
#define HS_META_SIZE 4096u
/* The ring of data after the meta page: a power of two in this range. */
#define HS_RING_MIN_SIZE 4096u
#define HS_RING_MAX_SIZE (UINT64_C(1) << 30)
#define HS_BUILD_ID_MAX 40
#define HS_HEAP_NAME_SIZE 32
#define HS_MAX_FRAMES 256

/* Environment variables the client reads (all set by `heapscope record`). */
#define HS_ENV_SOCKET "HEAPSCOPE_SOCKET"
#define HS_ENV_TOKEN "HEAPSCOPE_TOKEN" /* 32 hex digits */

enum hs_record_type {
  HS_REC_PAD = 0,    /* filler up to the end of the data area; no body */
  HS_REC_MALLOC = 1, /* struct hs_malloc */
  HS_REC_FREE = 2,   /* struct hs_free */
  HS_REC_STACK = 3,  /* struct hs_stack + u64 pcs[depth], leaf first */
  HS_REC_MODULE = 4, /* struct hs_module + char path[path_len] */
  HS_REC_HEAP = 5,   /* struct hs_heap */
  HS_REC_HEAP_MALLOC = 6, /* struct hs_heap_malloc (custom heaps, below) */
  HS_REC_HEAP_FREE = 7,   /* struct hs_heap_free */
  /* Python frames, see docs/python-frames.md: */
  HS_REC_PYCODE = 8, /* struct hs_pycode + name + file + line table */
  HS_REC_PYINFO = 9, /* struct hs_pyinfo + char status[status_len] */
  HS_REC_LABELSET = 10, /* struct hs_labelset + pairs (allocation labels, below) */
  HS_REC_TYPE_COUNT = 11,
};

enum hs_status {
  HS_STATUS_OK = 0,
  HS_STATUS_REJECTED = 1, /* unknown session, bad version, pid mismatch */
  HS_STATUS_NOT_TARGETED = 2, /* a valid session that does not profile this
                                 process (record -n): stay dormant, no ring */
};

enum hs_config_flags {
  HS_CFG_BLOCK_CLIENT = 1u << 0, /* wait for space instead of dropping */
  HS_CFG_MMAP_FILES = 1u << 1,   /* the mmap heap counts file-backed and shared
                                    mappings too, not only anonymous private ones */
  HS_CFG_TSC = 1u << 2, /* x86-64: stamp MALLOC, FREE, HEAP_MALLOC and HEAP_FREE ts with the
                           CPU's time-stamp counter (rdtsc: a third of CLOCK_MONOTONIC's cost),
                           which the producer converts to CLOCK_MONOTONIC ns; given only where
                           the TSC is the kernel's clocksource, constant and nonstop */
};

enum hs_unwinder {
  HS_UNWINDER_AUTO = 0, /* our CFA walk, then libunwind if it loads, else frame pointers */
  HS_UNWINDER_LIBUNWIND = 1,
  HS_UNWINDER_FP = 2,
  HS_UNWINDER_NONE = 3, /* only the immediate caller */
  /* Reported only (hs_meta.unwinder), never asked for: auto without libunwind, our CFA
   * walk (client/cfa.c) with frame pointers where it gives up. */
  HS_UNWINDER_CFA = 4,
};

enum hs_client_state {
  HS_CLIENT_CONNECTING = 0,
  HS_CLIENT_ACTIVE = 1,
  HS_CLIENT_DISABLED = 2, /* turned itself off; see client_error */
  HS_CLIENT_EXITING = 3,  /* the process ran its last destructor and shut the socket down */
};

enum hs_client_error {
  HS_ERR_NONE = 0,
  HS_ERR_PRODUCER_GONE = 1,   /* socket closed while waiting for space */
  HS_ERR_SHUTTING_DOWN = 2,   /* the producer asked the client to stop */
  HS_ERR_RECORD_TOO_BIG = 3,  /* a record larger than half the ring (with a
                                 PAD in front it might never fit) */
  HS_ERR_FORKED = 4,          /* reserved: a fork child stops profiling but
                                 must not write the meta its parent uses */
  HS_ERR_OUT_OF_MEMORY = 5,   /* mmap for client tables failed */
  HS_ERR_SOCKET_LOST = 6,     /* the program closed the client's socket, or
                                 put another file in its slot (close loop,
                                 closefrom, dup2) */
  HS_ERR_WAIT_TIMEOUT = 7,    /* a wait for ring space passed its bound
                                 (the producer stopped reading) */
};

/* client -> producer, first bytes on the socket. */
struct hs_hello {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;
  uint32_t ppid;
  uint32_t reserved;
  uint8_t token[HS_TOKEN_SIZE];
  uint64_t start_ts; /* CLOCK_MONOTONIC ns (the records' clock) as the client connects: the process's start for its
                        timeline (the producer reads the hello later; a short program may
                        have reached its peak by then) */
};

/* producer -> client, with the ring memfd attached when status == OK. */
struct hs_config {
  uint64_t magic;
  uint32_t version;
  uint32_t status;       /* enum hs_status */
  uint64_t interval;     /* mean sampling interval in bytes, >= 1 */
  uint64_t ring_size;    /* data bytes, power of two */
  uint64_t seed;         /* sampler seed; each thread mixes in its index */
  uint32_t flags;        /* enum hs_config_flags */
  uint32_t unwinder;     /* enum hs_unwinder */
  uint32_t max_frames;   /* <= HS_MAX_FRAMES */
  uint32_t reserved;
};

/* First HS_META_SIZE bytes of the shared memory. Counters are written by the
 * client with relaxed atomics and read by the producer at any time. */
struct hs_ring_meta {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved0;
  uint64_t ring_size;
  uint64_t pad0[5];
  /* Own cache lines: written by different processes. */
  uint64_t write_pos; /* next byte to reserve; CAS by writers */
  uint64_t pad1[7];
  uint64_t read_pos; /* everything below is consumed and zeroed */
  uint64_t pad2[7];
  uint32_t shutting_down; /* producer -> client: stop sending */
  uint32_t client_state;  /* enum hs_client_state */
  uint32_t client_error;  /* enum hs_client_error */
  uint32_t unwinder;      /* enum hs_unwinder actually in use */
  /* Client statistics, for rare events only: counting every sample here
   * would make all threads write one cache line. The producer counts the
   * records it reads itself. */
  uint64_t blocked_ns;          /* time threads waited for ring space */
  uint64_t dropped_records;     /* records lost to a full ring */
  uint64_t unwinding_errors;    /* unwinds that returned no frame */
  uint64_t unwind_ns;           /* estimated total unwinding time */
  uint64_t stack_table_full;    /* stacks sent again: interning table full */
  uint64_t addr_table_full;     /* sampled addresses the free set missed */
  uint64_t truncated_stacks;    /* stacks cut at max_frames */
  uint64_t module_rescans;      /* dl_iterate_phdr rescans (map_reparses) */
  /* Python frames (docs/python-frames.md, section 4). */
  uint64_t python_walks;           /* sampled stacks walked for Python frames */
  uint64_t python_walks_invalid;   /* walks cut by a pointer that failed a check */
  uint64_t python_walks_truncated; /* walks cut at HS_MAX_PYFRAMES */
  uint64_t python_codes_sent;      /* HS_REC_PYCODE records */
  uint64_t python_codes_failed;    /* code objects that did not validate */
  /* Written by the client at the process's end: its last destructor, before
   * it shuts the socket down, or its _exit (client/session.c, note_exit); 0: not
   * known (a signal killed it). */
  uint64_t exit_peak_rss; /* bytes: the process's VmHWM at that moment */
  uint64_t own_rss;       /* bytes of heapscope's own mappings resident then (client/own.h) */
  uint64_t exit_ts;       /* CLOCK_MONOTONIC ns (the records' clock) at that moment: the process's end, as the
                             producer's own sight of it comes later */
  /* mmap, munmap, mremap and brk made through syscall(2) rather than the C
   * library's functions (client/maphooks.c): the mmap and brk heaps do not
   * see them. Bytes: what those mmap, mremap and brk calls asked for. */
  uint64_t direct_map_calls;
  uint64_t direct_map_bytes;
};

struct hs_malloc {
  uint64_t seq;         /* per-process sequence number */
  uint64_t addr;        /* returned by the real allocator */
  uint64_t sample_size; /* bytes this sample stands for (interval*k or size) */
  uint64_t alloc_size;  /* bytes the program asked for */
  uint64_t stack_id;    /* hash of the stack; defined once by HS_REC_STACK */
  uint64_t ts;          /* CLOCK_MONOTONIC ns (vDSO, no system call), or with HS_CFG_TSC the
                           TSC: fine enough for lifetimes of a millisecond (the free's ts
                           less this one) */
  uint32_t tid;         /* the allocating thread's kernel id (gettid(); 0 = not known),
                           cached in the thread's TLS: no system call per sample */
  uint32_t label_set;   /* the thread's label set (HS_REC_LABELSET); 0 = no labels */
};

struct hs_free {
  uint64_t seq;
  uint64_t addr;
  uint64_t ts; /* CLOCK_MONOTONIC ns as the free is sent: the allocation's lifetime ends */
};

struct hs_stack {
  uint64_t stack_id;
  uint32_t depth;  /* number of u64 pcs that follow (return addresses) */
  uint32_t flags;  /* HS_STACK_TRUNCATED */
};
#define HS_STACK_TRUNCATED 1u
/* ---- Python frames (docs/python-frames.md) ----
 * HS_STACK_PYTHON: after pcs[depth] come struct hs_pystack and
 * struct hs_pyframe[py_depth], innermost first. The stack id covers them. */
#define HS_STACK_PYTHON 2u
#define HS_MAX_PYFRAMES 128

struct hs_pystack {
  uint32_t py_depth; /* struct hs_pyframe that follow */
  uint32_t py_flags; /* HS_PY_WALK_* bits of the walk (client/pyframes.h) */
};

struct hs_pyframe {
  uint64_t code_key; /* defined once per process by HS_REC_PYCODE */
  int32_t lasti;     /* byte offset of the instruction; -1 = not started */
  uint32_t flags;    /* HS_PY_FRAME_ENTRY: outermost frame of its eval activation */
};

/* A code object, sent once per code key; the tail is name, file, table
 * (no NULs) then padding. */
struct hs_pycode {
  uint64_t code_key;
  int32_t first_line;
  uint16_t line_format; /* enum hs_py_line_format (client/pyframes.h) */
  uint16_t flags;       /* truncated: name 1, file 2, table 4 */
  uint32_t name_len, file_len, table_len, reserved;
};

/* Once per process, before any Python frame: what detection found. */
struct hs_pyinfo {
  uint64_t eval_lo, eval_hi; /* _PyEval_EvalFrameDefault, [lo, hi) */
  uint64_t hexversion;
  uint32_t state;      /* enum hs_py_state (client/pyframes.h) */
  uint32_t status_len; /* bytes of the status line that follow (no NUL) */
  uint32_t pymem;      /* 1: the MEM and OBJ allocator domains are sampled too */
  uint32_t reserved;
};
/* ---- end of Python frames ---- */

/* One executable PT_LOAD of a loaded ELF object (from dl_iterate_phdr): an
 * object with several (node, -z separate-code links) sends one record for
 * each, same base, path and build id. rel_pc = pc - base. Also, from
 * /proc/self/maps: a file's pages mapped again (V8's builtins: base set so
 * that rel_pc is the object's own ELF address), and a runtime's mapping of
 * its jit-PID.dump (no build id; the producer reads the file for names). */
struct hs_module {
  uint64_t base;         /* dlpi_addr: load bias of the object */
  uint64_t start;        /* first byte of the executable PT_LOAD */
  uint64_t end;          /* one past its last byte */
  uint64_t file_offset;  /* p_offset of that segment, page aligned */
  uint64_t vaddr;        /* p_vaddr of that segment, page aligned */
  uint32_t build_id_len; /* bytes used in build_id */
  uint32_t path_len;     /* bytes of path that follow (no NUL) */
  uint8_t build_id[HS_BUILD_ID_MAX];
};

struct hs_heap {
  uint64_t interval;
  uint32_t heap_id;
  uint32_t reserved;
  char name[HS_HEAP_NAME_SIZE]; /* NUL terminated */
};

/* ---- Custom heaps (docs/custom-heaps.md) ----
 *
 * A program reports the allocations of its own pools through the public
 * API (include/heapscope.h, client/heaps.c). Each heap it registers gets an
 * id >= HS_FIRST_CUSTOM_HEAP (1 is libc.malloc) and one HS_REC_HEAP record
 * with its name and interval, written before the id is handed back, so it
 * comes before every record of that heap in the ring.
 *
 * HS_REC_HEAP_MALLOC / HS_REC_HEAP_FREE are MALLOC / FREE with a heap id.
 * Each custom heap has its own gapless sequence counter, starting at 1
 * (heapprofd numbers each heap apart too): the producer keeps one tracker
 * per (process, heap) and orders each heap's ops on their own. Stack ids
 * are shared with the malloc heap (one interning table per process).
 */
#define HS_FIRST_CUSTOM_HEAP 2u
#define HS_MAX_CUSTOM_HEAPS 64u

struct hs_heap_malloc {
  uint64_t seq; /* the heap's own sequence number */
  uint32_t heap_id;
  uint32_t label_set; /* as hs_malloc's */
  uint64_t addr;
  uint64_t sample_size;
  uint64_t alloc_size;
  uint64_t stack_id;
  uint64_t ts;
};

struct hs_heap_free {
  uint64_t seq;
  uint32_t heap_id;
  uint32_t reserved;
  uint64_t addr;
  uint64_t ts; /* as hs_free's */
};

/* The heap of Python's MEM and OBJ allocator domains (client/pymem.c): one
 * fixed id outside the custom range, announced by the client itself (an
 * HS_REC_HEAP with this id and HS_PY_HEAP_NAME, from the session's start or
 * from the late install of an attach or an embedded interpreter) and
 * carried like a custom heap (HEAP_MALLOC / HEAP_FREE, its own sequence).
 * A request pymalloc passes on to malloc is booked here only. */
#define HS_PY_HEAP_ID 112u
#define HS_PY_HEAP_NAME "python.pymalloc"

/* The memory malloc never sees (client/maps.c): the program's own mmap and
 * mremap (anonymous private mappings; file-backed and shared ones too with
 * HS_CFG_MMAP_FILES) and its brk and sbrk. Fixed ids like Python's, announced
 * by the client before its first record of each, carried like a custom heap
 * (HEAP_MALLOC / HEAP_FREE, a sequence each). An allocator heapscope already
 * counts (malloc's, pymalloc's) never books here. docs/mmap-heaps.md. */
#define HS_MMAP_HEAP_ID 113u
#define HS_MMAP_HEAP_NAME "mmap"
#define HS_BRK_HEAP_ID 114u
#define HS_BRK_HEAP_NAME "brk"

/* The C library's malloc family: heap 1, announced first by every session
 * (HS_REC_MALLOC / HS_REC_FREE carry no heap id: theirs is this one). "all"
 * is what `--heap all` means, so no heap is called that. These names and
 * HS_PY_HEAP_NAME are the one definition of the heaps heapscope names
 * itself (with the mmap and brk heaps'): wire/heapnames.py mirrors them,
 * tests/unit/wire checks both. */
#define HS_MALLOC_HEAP_ID 1u
#define HS_MALLOC_HEAP_NAME "libc.malloc"
#define HS_ALL_HEAPS_NAME "all"

/* ---- Allocation labels (docs/labels.md) ----
 *
 * A thread's current label set (heapscope_label_push in include/heapscope.h,
 * heapscope.label in Python) is interned by the client: each distinct set
 * gets an id from 1 to HS_MAX_LABEL_SETS and one HS_REC_LABELSET record, sent
 * when the set is first made in a session; samples carry only the id. A
 * sample may reach the producer before its set's record (another thread made
 * the set): the producer names ids at its dumps, not as it reads samples.
 * Sets past the cap share HS_LABEL_SET_OVERFLOW, which no record defines.
 *
 * The tail: `count` pairs, each key NUL value NUL, text_len bytes in all
 * (then padding). Keys are 1 to HS_LABEL_KEY_MAX of [A-Za-z0-9_.-], values
 * up to HS_LABEL_VALUE_MAX bytes of UTF-8 without NUL; sorted by key, each
 * key once.
 */
#define HS_MAX_LABEL_SETS 1024u
#define HS_LABEL_SET_OVERFLOW UINT32_MAX
#define HS_LABEL_KEY_MAX 63u
#define HS_LABEL_VALUE_MAX 127u
#define HS_LABEL_TEXT_MAX 512u /* bytes of one set's tail */

struct hs_labelset {
  uint32_t label_set; /* 1..HS_MAX_LABEL_SETS */
  uint32_t count;     /* pairs that follow */
  uint32_t text_len;
  uint32_t reserved;
};

#define HS_RECORD_HEADER(size, type) \
  ((uint64_t)(uint32_t)(size) | ((uint64_t)(uint32_t)(type) << 32))
#define HS_RECORD_SIZE(header) ((uint32_t)((header) & 0xffffffffu))
#define HS_RECORD_TYPE(header) ((uint32_t)((header) >> 32))
#define HS_ALIGN8(n) (((n) + 7u) & ~(uint64_t)7u)

#if defined(__cplusplus)
#define HS_STATIC_ASSERT static_assert
#else
#define HS_STATIC_ASSERT _Static_assert
#endif
HS_STATIC_ASSERT(sizeof(struct hs_hello) == 48, "hs_hello");
HS_STATIC_ASSERT(sizeof(struct hs_config) == 56, "hs_config");
HS_STATIC_ASSERT(sizeof(struct hs_ring_meta) <= HS_META_SIZE, "meta");
HS_STATIC_ASSERT(sizeof(struct hs_ring_meta) == 352, "hs_ring_meta");
HS_STATIC_ASSERT(sizeof(struct hs_malloc) == 56, "hs_malloc");
HS_STATIC_ASSERT(sizeof(struct hs_free) == 24, "hs_free");
HS_STATIC_ASSERT(sizeof(struct hs_stack) == 16, "hs_stack");
HS_STATIC_ASSERT(sizeof(struct hs_module) == 88, "hs_module");
HS_STATIC_ASSERT(sizeof(struct hs_heap) == 48, "hs_heap");
HS_STATIC_ASSERT(sizeof(struct hs_heap_malloc) == 56, "hs_heap_malloc");
HS_STATIC_ASSERT(sizeof(struct hs_heap_free) == 32, "hs_heap_free");
HS_STATIC_ASSERT(sizeof(struct hs_pystack) == 8, "hs_pystack");
HS_STATIC_ASSERT(sizeof(struct hs_pyframe) == 16, "hs_pyframe");
HS_STATIC_ASSERT(sizeof(struct hs_pycode) == 32, "hs_pycode");
HS_STATIC_ASSERT(sizeof(struct hs_pyinfo) == 40, "hs_pyinfo");
HS_STATIC_ASSERT(sizeof(struct hs_labelset) == 16, "hs_labelset");

#endif /* HEAPSCOPE_WIRE_H */
