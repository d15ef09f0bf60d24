/*
 * pyframes.h: the calling thread's CPython frames, read inside the malloc
 * hook without the GIL, without a Python C-API call that allocates, without
 * allocating and without a lock. See docs/python-frames.md for the design.
 *
 *   hs_py_detect()    once at client start-up (and again after a dlopen that
 *                     may have brought libpython in). NOT hook-safe: it calls
 *                     dlsym/dladdr. Finds CPython in the process, reads its
 *                     version and picks the layout row for it.
 *   hs_py_walk()      in the hook, for the calling thread only. Hook-safe and
 *                     async-signal-safe: plain loads of validated pointers.
 *                     hs_py_walk_keyed() also computes each code key.
 *   hs_py_code_info() in the hook, the first time a code object is seen:
 *                     copies its names and raw line table into caller buffers.
 *
 * A frame is (code object address, byte offset of its current instruction);
 * the line number is computed outside the target from the line table
 * (bookkeeping/pylines.py). A code object address is only a key while the
 * object lives: the integration interns by (address, first line, name) the
 * way stacks are interned, see docs/python-frames.md.
 *
 * Versions: CPython 3.8 to 3.13 with the GIL. Anything else (3.14+, a
 * free-threaded build, a version string we cannot parse) is "unsupported":
 * hs_py_walk() returns 0 frames, and hs_py_status_line() says why.
 */
#ifndef HEAPSCOPE_CLIENT_PYFRAMES_H
#define HEAPSCOPE_CLIENT_PYFRAMES_H

#include <stddef.h>
#include <stdint.h>

#define HS_PY_API __attribute__((visibility("hidden")))

enum hs_py_state {
  HS_PY_ABSENT = 0,      /* no CPython in the process (or not detected yet) */
  HS_PY_SUPPORTED = 1,   /* a layout row matches: hs_py_walk() works */
  HS_PY_UNSUPPORTED = 2, /* CPython is here but its layout is unknown */
};

/* The line-table format of a version, for bookkeeping/pylines.py. */
enum hs_py_line_format {
  HS_PY_LINES_LNOTAB = 1,    /* 3.8, 3.9: co_lnotab, (addr delta, line delta) pairs */
  HS_PY_LINES_310 = 2,       /* 3.10: co_linetable, (end delta, line delta) pairs */
  HS_PY_LINES_LOCATIONS = 3, /* 3.11+: co_linetable, the location table */
};

/* One Python frame, innermost first. */
struct hs_py_frame {
  uint64_t code;  /* address of the PyCodeObject */
  int32_t lasti;  /* byte offset of the instruction executing; -1 = not started */
  uint32_t flags; /* HS_PY_FRAME_* */
};

/* The frame is the outermost one its _PyEval_EvalFrameDefault activation
 * runs: the next (outer) frame belongs to another native activation. On
 * 3.8-3.10 every frame has it; on 3.11+ one activation runs a run of
 * frames, and this flag closes the run. */
#define HS_PY_FRAME_ENTRY 1u

/* Why a walk stopped early (the bits of *why). */
#define HS_PY_WALK_NOSTATE 1u   /* no thread state for this thread (or no CPython) */
#define HS_PY_WALK_TRUNCATED 2u /* more frames than max (or than the chain bound) */
#define HS_PY_WALK_INVALID 4u   /* a pointer failed validation: the rest is dropped */

/* Finds CPython and picks its layout. Returns an enum hs_py_state. Not
 * hook-safe (dlsym). Calling it again re-detects (after a dlopen). */
int hs_py_detect(void) HS_PY_API;

/* Test hook: detect as if the version were `hexversion` (PY_VERSION_HEX
 * form) and the build free-threaded or not; the symbols are still looked up
 * in the process. */
int hs_py_detect_as(unsigned long hexversion, int free_threaded) HS_PY_API;

/* A symbol of the CPython found by hs_py_detect() (dlsym: not hook-safe). */
void *hs_py_symbol(const char *name) HS_PY_API;

/* The state and version found by the last hs_py_detect(). */
int hs_py_state(void) HS_PY_API;
unsigned long hs_py_hexversion(void) HS_PY_API;
int hs_py_line_format(void) HS_PY_API; /* enum hs_py_line_format, 0 if not supported */

/* One line for the summary and for `stats`, e.g. "python frames: CPython
 * 3.12 (layout known)" or "python frames: off, CPython 3.14 has an unknown
 * layout: stacks are native-only". A static string, valid until the next
 * hs_py_detect(). */
const char *hs_py_status_line(void) HS_PY_API;

/* Address range [lo, hi) of _PyEval_EvalFrameDefault, for the splice (0, 0
 * when unknown). */
void hs_py_eval_range(uint64_t *lo, uint64_t *hi) HS_PY_API;

/* Walks the calling thread's Python frames, innermost first, into out[0..max).
 * Returns the number written; *why (may be NULL) gets HS_PY_WALK_* bits.
 * Hook-safe: no allocation, no lock, no syscall, no GIL. */
int hs_py_walk(struct hs_py_frame *out, int max, unsigned *why) HS_PY_API;

/* What hs_py_walk_keyed() says besides the frames. */
struct hs_py_walk_info {
  uint64_t hash; /* hs_py_part_hash() of the frames */
  int fresh;     /* out[0, fresh) were walked now and codes[0, fresh) are set; the frames
                  * after them were the thread's last walk's, out to the root */
};

/* hs_py_walk() and hs_py_code_key() in one pass, for the sampler: out[i].code
 * gets the code object's key (never 0: the walk has checked the object) and
 * codes[i] (room for max) its address, for hs_py_code_info(). A frame that
 * runs the same code object as the frame before it reuses its key. With
 * `info` (may be NULL), the walk re-uses the outer frames of the thread's
 * last walk when every field it would read of them is unchanged (the walk
 * memo, docs/python-frames.md): the frames are the same, but codes[] is set
 * only for the fresh ones. Same guarantees as hs_py_walk(). */
int hs_py_walk_keyed(struct hs_py_frame *out, uint64_t *codes, int max, unsigned *why,
                     struct hs_py_walk_info *info) HS_PY_API;

/* The hash of a walk's frames (as keyed by hs_py_walk_keyed), built from the
 * outermost frame inward: one bijective step per frame. */
uint64_t hs_py_part_hash(const struct hs_py_frame *frames, int n) HS_PY_API;

/* Forgets every thread's walk memo: a fork child's new session (its codes
 * must be sent again). Only while one thread runs. */
void hs_py_memo_reset(void) HS_PY_API;

/* What the producer needs to intern a code object once. The caller owns the
 * buffers; strings are UTF-8, not NUL-terminated, cut at a code point when a
 * buffer is too small (the *_len fields then hold what was copied and
 * `truncated` is set). */
struct hs_py_code_info {
  char *name;          /* co_qualname on 3.11+, co_name before */
  uint32_t name_cap, name_len;
  char *file;          /* co_filename */
  uint32_t file_cap, file_len;
  uint8_t *table;      /* co_lnotab (3.8, 3.9) or co_linetable (3.10+) */
  uint32_t table_cap, table_len;
  int32_t first_line;  /* co_firstlineno */
  uint32_t line_format; /* enum hs_py_line_format */
  uint32_t truncated;  /* 1 bit per field: name 1, file 2, table 4 */
};

/* Fills *out for the code object at `code` (an address from hs_py_walk()).
 * Returns 0, or -1 if the object does not validate as a code object whose
 * fields are a str, a str and a bytes. Hook-safe like hs_py_walk(). */
int hs_py_code_info(uint64_t code, struct hs_py_code_info *out) HS_PY_API;

/* The interning key of a code object: a hash of its address and of the
 * addresses of its name, file and line table objects and its first line, so
 * that a code object freed and another allocated at the same address get
 * different keys. 0 if `code` does not validate. Hook-safe. */
uint64_t hs_py_code_key(uint64_t code) HS_PY_API;

/* The layout rows, for the layout-check test. One per minor version. */
struct hs_py_layout {
  uint8_t minor;          /* 3.<minor> */
  uint8_t model;          /* HS_PY_MODEL_* */
  uint8_t line_format;    /* enum hs_py_line_format */
  uint8_t pad_;
  /* PyThreadState */
  uint16_t ts_interp;     /* interp (validated non-NULL) */
  uint16_t ts_thread_id;  /* thread_id (== pthread_self()) */
  uint16_t ts_frame;      /* frame (3.8-3.10), cframe (3.11, 3.12), current_frame (3.13) */
  uint16_t cf_current;    /* _PyCFrame.current_frame (3.11, 3.12) */
  /* the frame: PyFrameObject (3.8-3.10) or _PyInterpreterFrame (3.11+) */
  uint16_t fr_back;       /* f_back / previous */
  uint16_t fr_code;       /* f_code / f_executable */
  uint16_t fr_instr;      /* f_lasti (int) / prev_instr / instr_ptr */
  uint16_t fr_is_entry;   /* is_entry (3.11 only) */
  uint16_t fr_owner;      /* owner (3.11+) */
  /* PyCodeObject */
  uint16_t co_filename;
  uint16_t co_name;
  uint16_t co_qualname;   /* 3.11+ */
  uint16_t co_lines;      /* co_lnotab (3.8, 3.9) / co_linetable */
  uint16_t co_firstlineno;
  uint16_t co_firsttraceable; /* 3.11+ */
  uint16_t co_code_adaptive;  /* 3.11+: the first instruction */
  /* objects */
  uint16_t ob_type;
  uint16_t bytes_size;    /* PyVarObject.ob_size */
  uint16_t bytes_sval;
  uint16_t str_length;    /* PyASCIIObject.length */
  uint16_t str_state;
  uint16_t str_ascii_size;   /* sizeof(PyASCIIObject): compact ASCII data */
  uint16_t str_compact_size; /* sizeof(PyCompactUnicodeObject) */
};

#define HS_PY_MODEL_FRAMEOBJECT 1 /* 3.8-3.10: tstate->frame, PyFrameObject */
#define HS_PY_MODEL_CFRAME 2      /* 3.11, 3.12: tstate->cframe->current_frame */
#define HS_PY_MODEL_TSTATE 3      /* 3.13: tstate->current_frame */

/* The row for 3.<minor>, or NULL. */
const struct hs_py_layout *hs_py_layout_for(unsigned minor) HS_PY_API;

#endif
