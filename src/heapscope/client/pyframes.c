/*
 * pyframes.c: the CPython frame walker (see pyframes.h and
 * docs/python-frames.md).
 *
 * Which thread state. We call PyGILState_GetThisThreadState(): on 3.8-3.13
 * it is a pthread_getspecific() of the runtime's GIL-state TSS key (see
 * Python/pystate.c of each version), so it takes no lock, allocates nothing
 * and does not need the GIL. It returns the thread state bound to *this*
 * thread even while the thread has released the GIL (Py_BEGIN_ALLOW_THREADS
 * around a C library that allocates), which is exactly when a native
 * allocation wants its Python callers. The "current" thread state of 3.12+
 * (_Py_tss_tstate, a TLS variable) is NULL in that case, and reading it from
 * a dlopen()ed libpython may go through __tls_get_addr, which can allocate.
 * The TSS key only exists between Py_Initialize() and finalization, so we
 * ask Py_IsInitialized() (a plain load of _PyRuntime.initialized) first.
 * Limitation: a thread running a sub-interpreter has its main-interpreter
 * thread state in that key, so we would show that chain (documented).
 *
 * Why plain loads are safe. The chain we read belongs to the calling thread
 * and only the calling thread changes it; the hook runs synchronously inside
 * that thread, at a malloc() call site of CPython or of a C extension, never
 * in the middle of a frame link/unlink (CPython links a frame only after
 * filling it: _PyFrame_Initialize then `frame->previous = ...`). So every
 * pointer on the chain points into live memory: frames (on the thread's
 * data stack, or inside a generator), and code objects the frames hold
 * strong references to. What we still guard against is a layout mismatch
 * or a state we did not foresee: every pointer is checked to be non-NULL,
 * canonical user-space and aligned before it is read; every code object
 * (and every 3.8-3.10 frame) must have the exact type (ob_type ==
 * &PyCode_Type / &PyFrame_Type); an instruction offset must fall inside its
 * code object; owners must be known values; the walk is bounded. A mismatch
 * ends the walk (HS_PY_WALK_INVALID), it never reads past it. We chose not
 * to copy through process_vm_readv(): one syscall per load would cost tens
 * of microseconds per sample for a risk the checks above already cover.
 *
 * Nothing here takes a lock, allocates or calls into libc in hs_py_walk()
 * or hs_py_code_info() except pthread_self() and the two CPython functions
 * named above; both are async-signal-safe in practice (no locks, no
 * allocation).
 */
#include "pyframes.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyframes_rt.h"

/* The layout rows. Every number comes from that version's own headers
 * (offsetof/sizeof on x86-64 / aarch64 LP64 builds without Py_TRACE_REFS);
 * tests/unit/client/pyframes_layout.c checks each row against the headers
 * of every installed CPython. */
static const struct hs_py_layout layouts[] = {
  /* minor model line_format pad
   * ts_interp ts_thread_id ts_frame cf_current
   * fr_back fr_code fr_instr fr_is_entry fr_owner
   * co_filename co_name co_qualname co_lines co_firstlineno
   * co_firsttraceable co_code_adaptive
   * ob_type bytes_size bytes_sval str_length str_state
   * str_ascii_size str_compact_size */
  {8, HS_PY_MODEL_FRAMEOBJECT, HS_PY_LINES_LNOTAB, 0,
   16, 176, 24, 0,
   24, 32, 104, 0, 0,
   104, 112, 0, 120, 40, 0, 0,
   8, 16, 32, 16, 32, 48, 72},
  {9, HS_PY_MODEL_FRAMEOBJECT, HS_PY_LINES_LNOTAB, 0,
   16, 176, 24, 0,
   24, 32, 104, 0, 0,
   104, 112, 0, 120, 40, 0, 0,
   8, 16, 32, 16, 32, 48, 72},
  {10, HS_PY_MODEL_FRAMEOBJECT, HS_PY_LINES_310, 0,
   16, 176, 24, 0,
   24, 32, 96, 0, 0,
   104, 112, 0, 120, 40, 0, 0,
   8, 16, 32, 16, 32, 48, 72},
  {11, HS_PY_MODEL_CFRAME, HS_PY_LINES_LOCATIONS, 0,
   16, 152, 56, 8,
   48, 32, 56, 68, 69,
   112, 120, 128, 136, 72, 168, 184,
   8, 16, 32, 16, 32, 48, 72},
  {12, HS_PY_MODEL_CFRAME, HS_PY_LINES_LOCATIONS, 0,
   16, 136, 56, 0,
   8, 0, 56, 0, 70,
   112, 120, 128, 136, 68, 176, 192,
   8, 16, 32, 16, 32, 40, 56},
  {13, HS_PY_MODEL_TSTATE, HS_PY_LINES_LOCATIONS, 0,
   16, 152, 72, 0,
   8, 0, 56, 0, 70,
   112, 120, 128, 136, 68, 184, 200,
   8, 16, 32, 16, 32, 40, 56},
};

const struct hs_py_layout *hs_py_layout_for(unsigned minor) {
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
    if (layouts[i].minor == minor) return &layouts[i];
  return NULL;
}

/* Owner values of _PyInterpreterFrame (Include/internal/pycore_frame.h). */
#define OWNED_BY_GENERATOR 1
#define OWNED_BY_CSTACK 3 /* 3.12+: the shim frame of an eval activation */

struct py_runtime hs_py_rt;
static int rt_state; /* enum hs_py_state, published last (release) */
static char status_line[200] = "python frames: no CPython in the process";

/* ------------------------------------------------------------------ */
/* Detection (start-up, not hook-safe)                                 */

struct find_lib {
  char path[512];
};

static int find_libpython(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct find_lib *f = data;
  const char *name = info->dlpi_name;
  if (name == NULL || name[0] == '\0') return 0;
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libpython3", 10) != 0) return 0;
  snprintf(f->path, sizeof f->path, "%s", name);
  return 1;
}

/* A symbol of CPython: in the global scope (the python executable exports
 * its symbols, and a libpython it links against is global), else in a
 * libpython3 a host program dlopen()ed RTLD_LOCAL (an embedded interpreter).
 * The handle from RTLD_NOLOAD is kept: libpython stays mapped while we hold
 * pointers to its type objects. */
static void *lib_handle;

static void *py_sym(const char *name) {
  void *p = dlsym(RTLD_DEFAULT, name);
  if (p != NULL || lib_handle == NULL) return p;
  return dlsym(lib_handle, name);
}

void *hs_py_symbol(const char *name) {
  return py_sym(name);
}

static unsigned long version_from_string(const char *v) {
  /* "3.9.18 (main, ...)" -> 0x030912f0 (the final-release form). */
  char *end;
  unsigned long major = strtoul(v, &end, 10);
  if (*end != '.') return 0;
  unsigned long minor = strtoul(end + 1, &end, 10);
  unsigned long micro = 0;
  if (*end == '.') micro = strtoul(end + 1, &end, 10);
  if (major > 255 || minor > 255 || micro > 255) return 0;
  return (major << 24) | (minor << 16) | (micro << 8) | 0xf0;
}

static int publish(int state) {
  __atomic_store_n(&rt_state, state, __ATOMIC_RELEASE);
  return state;
}

static int unsupported(const char *why) {
  hs_py_rt.lay = NULL;
  snprintf(status_line, sizeof status_line,
           "python frames: off, CPython %lu.%lu %s: stacks are native-only",
           (hs_py_rt.hexversion >> 24) & 0xff, (hs_py_rt.hexversion >> 16) & 0xff, why);
  return publish(HS_PY_UNSUPPORTED);
}

static int detect(int fake, unsigned long fake_version, int fake_free_threaded) {
  /* Once supported, the row stays: walkers on other threads may be using
   * it. Re-detection only upgrades ABSENT. */
  if (!fake && __atomic_load_n(&rt_state, __ATOMIC_ACQUIRE) == HS_PY_SUPPORTED)
    return HS_PY_SUPPORTED;
  if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") == NULL && lib_handle == NULL) {
    struct find_lib f = {{0}};
    if (dl_iterate_phdr(find_libpython, &f) != 0)
      lib_handle = dlopen(f.path, RTLD_LAZY | RTLD_NOLOAD);
  }
  struct py_runtime r;
  memset(&r, 0, sizeof r);
  r.is_initialized = (is_initialized_fn)py_sym("Py_IsInitialized");
  r.get_tstate = (get_tstate_fn)py_sym("PyGILState_GetThisThreadState");
  if (r.is_initialized == NULL || r.get_tstate == NULL) {
    snprintf(status_line, sizeof status_line, "python frames: no CPython in the process");
    return publish(HS_PY_ABSENT);
  }
  const unsigned long *pv = py_sym("Py_Version"); /* 3.11+ */
  if (pv != NULL) {
    r.hexversion = *pv;
  } else {
    const char *(*get_version)(void) = (const char *(*)(void))py_sym("Py_GetVersion");
    r.hexversion = get_version ? version_from_string(get_version()) : 0;
  }
  /* 3.13+ carries _Py_DebugOffsets at the start of _PyRuntime: the cookie
   * "xdebugpy", the version, then free_threaded (pycore_runtime.h). */
  int free_threaded = 0;
  const unsigned char *runtime = py_sym("_PyRuntime");
  if (runtime != NULL && memcmp(runtime, "xdebugpy", 8) == 0) {
    uint64_t ft;
    memcpy(&ft, runtime + 16, sizeof ft);
    free_threaded = ft != 0;
  }
  if (fake) {
    r.hexversion = fake_version;
    free_threaded = fake_free_threaded;
  }
  hs_py_rt = r;
  if (r.hexversion == 0) {
    snprintf(status_line, sizeof status_line,
             "python frames: off, the CPython version could not be read: stacks are native-only");
    return publish(HS_PY_UNSUPPORTED);
  }
  if (free_threaded) return unsupported("is a free-threaded build");
  unsigned major = (r.hexversion >> 24) & 0xff, minor = (r.hexversion >> 16) & 0xff;
  const struct hs_py_layout *lay = major == 3 ? hs_py_layout_for(minor) : NULL;
  if (lay == NULL) return unsupported("has an unknown layout");
  r.code_type = (uintptr_t)py_sym("PyCode_Type");
  r.frame_type = (uintptr_t)py_sym("PyFrame_Type");
  r.unicode_type = (uintptr_t)py_sym("PyUnicode_Type");
  r.bytes_type = (uintptr_t)py_sym("PyBytes_Type");
  uintptr_t type_type = (uintptr_t)py_sym("PyType_Type");
  if (!r.code_type || !r.frame_type || !r.unicode_type || !r.bytes_type || !type_type)
    return unsupported("lacks a type symbol");
  /* Self-check of the object header: a type object's own type is
   * PyType_Type. A debug (Py_TRACE_REFS) or free-threaded build moves
   * ob_type and fails here. */
  if (*(const uintptr_t *)(r.code_type + lay->ob_type) != type_type)
    return unsupported("has an unexpected object header");
  void *eval = py_sym("_PyEval_EvalFrameDefault");
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (eval != NULL && dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym != NULL) {
    r.eval_lo = (uint64_t)(uintptr_t)eval;
    r.eval_hi = r.eval_lo + sym->st_size;
  }
  r.lay = lay;
  hs_py_rt = r;
  snprintf(status_line, sizeof status_line, "python frames: CPython %u.%u (layout known)",
           major, minor);
  return publish(HS_PY_SUPPORTED);
}

int hs_py_detect(void) {
  return detect(0, 0, 0);
}

int hs_py_detect_as(unsigned long hexversion, int free_threaded) {
  return detect(1, hexversion, free_threaded);
}

int hs_py_state(void) {
  return __atomic_load_n(&rt_state, __ATOMIC_ACQUIRE);
}

unsigned long hs_py_hexversion(void) {
  return hs_py_rt.hexversion;
}

int hs_py_line_format(void) {
  return hs_py_state() == HS_PY_SUPPORTED ? hs_py_rt.lay->line_format : 0;
}

const char *hs_py_status_line(void) {
  return status_line;
}

void hs_py_eval_range(uint64_t *lo, uint64_t *hi) {
  int ok = hs_py_state() == HS_PY_SUPPORTED;
  *lo = ok ? hs_py_rt.eval_lo : 0;
  *hi = ok ? hs_py_rt.eval_hi : 0;
}

/* The Python part's hash, built from the root (outermost frame) inward:
 * one multiply-rotate step per frame over its code key plus its (lasti,
 * flags) spread by a multiplication, so two parts that differ in a single
 * frame differ in one bijective step. From the root so that the walk memo
 * (below) keeps the hash of the outer frames it re-uses. */
#define PART_SEED 0x3c6ef372fe94f82bull
static inline uint64_t part_step(uint64_t h, const struct hs_py_frame *f) {
  uint64_t at = (uint64_t)(uint32_t)f->lasti << 8 | f->flags;
  uint64_t v = f->code + at * 0xc2b2ae3d27d4eb4full;
  return (rotl(h, 23) ^ v) * 0x9e3779b97f4a7c15ull;
}

uint64_t hs_py_part_hash(const struct hs_py_frame *frames, int n) {
  uint64_t h = PART_SEED;
  for (int i = n - 1; i >= 0; i--) h = part_step(h, &frames[i]);
  return h;
}

/* ------------------------------------------------------------------ */
/* The walk (hook-safe)                                                */

/* Byte offset of the instruction a 3.11+ frame is at, or -2 if the pointer
 * is outside the code object. -1 = not started yet. */
static inline __attribute__((always_inline)) int32_t instr_offset(const struct hs_py_layout *L, uintptr_t code, uintptr_t instr) {
  uintptr_t first = code + L->co_code_adaptive;
  /* ob_size of a code object is its number of code units. */
  intptr_t units = (intptr_t)load_ptr(code, L->bytes_size);
  if (units < 0 || (uintptr_t)units > MAX_CODE_UNITS) return -2;
  intptr_t off = (intptr_t)(instr - first);
  if (L->minor <= 12) {
    /* prev_instr: the code unit before the next instruction; the frame
     * is at prev_instr (the _PyInterpreterFrame_LASTI of 3.11/3.12). */
    if (off < 0) return off >= -2 ? -1 : -2;
  } else if (off < 0) {
    return -2;
  }
  if (off >= units * 2 || (off & 1)) return -2;
  return (int32_t)off;
}

/* 3.11+: sys._getframe() skips a frame that has not reached its first
 * traceable instruction (_PyFrame_IsIncomplete in pycore_frame.h). */
static inline __attribute__((always_inline)) int incomplete(const struct hs_py_layout *L, uintptr_t code, int8_t owner,
                             int32_t off) {
  if (owner == OWNED_BY_GENERATOR) return 0;
  int32_t first = load_i32(code, L->co_firsttraceable);
  /* 3.11/3.12 compare prev_instr (off) with first + firsttraceable, 3.13
   * instr_ptr: both "strictly below". */
  return off < first * 2;
}

/* ---- The walk memo ----
 *
 * Most of a sample's Python frames are the outer frames of the one before
 * (a test runner's, a parser's pipeline, main's loop): only the innermost
 * few change. Each thread state gets a slot (by its address, taken with a
 * CAS, so one walker at a time) holding its last complete walk: every raw
 * frame of the chain, root first, with everything the walk read from it
 * (frame address, owner bytes, code object, instruction, back link, and
 * the code object's name, file and line-table pointers and first line: what
 * its key is made of) and what it gave: the emitted frame (key, lasti,
 * final flags), the hash of the emitted frames from the root to it, the
 * ENTRY bit it hands to the frame emitted inside it. A new walk goes frame
 * by frame as before until it meets a frame whose address the memo holds;
 * it then re-reads those same fields of that frame and of every frame out
 * to the root, and when all are equal the rest of the walk would read the
 * same values and so give the same frames: it copies them and their hash.
 * Any difference and the walk goes on the plain way. So the result is the
 * plain walk's, bit for bit (tests/unit/client/test_pyframes.py checks it
 * inside every malloc()); a frame costs ~30 instructions re-read against
 * ~55-90 walked, keyed and hashed. A code object's key is what tells two
 * code objects at one address apart; re-reading its fields keeps that.
 * The slots are ~27 KiB each, 1.7 MiB of .bss in all: pages a process
 * without Python (or with few threads) never touches cost it nothing. */
#define MEMO_CAP 160   /* raw frames of a chain kept (< 255); longer chains are not kept */
#define MEMO_OUT 256   /* emitted frames kept (>= HS_MAX_PYFRAMES) */
#define MEMO_SLOTS 64  /* thread states with a memo at once (more share slots) */
#define MEMO_INDEX 64  /* frame address -> entry, direct-mapped */

struct memo_entry {
  uint64_t addr, code, instr;       /* the frame's own fields (code 0: a 3.12+ shim frame); its
                                     * back link is the address of the entry before it */
  uint64_t name, file, lines;       /* the code object's (its key) */
  uint64_t hash;                    /* hs_py_part_hash of the emitted frames root..here */
  int32_t firstline;
  uint16_t own;                     /* owner (3.12+), is_entry | owner << 8 (3.11), 0 (3.8-3.10) */
  uint8_t emitted;                  /* 1: this raw frame is a frame of the stack */
  uint8_t gift;                     /* ENTRY this frame and the unemitted ones outside it give inward */
  uint32_t nemit, pad_;             /* frames emitted root..here */
};

struct memo_slot {
  int busy;
  uint32_t gen;
  uint64_t ts;
  uint32_t m; /* entries [1, m] are the last walk's, root first; e[0] stands for "past the root" */
  uint8_t index[MEMO_INDEX];
  struct memo_entry e[MEMO_CAP + 1];
  struct memo_entry fresh[MEMO_CAP]; /* this walk's frames walked the plain way, innermost first */
  struct hs_py_frame out[MEMO_OUT];  /* emitted frames innermost first, the root's last */
};

static struct memo_slot memo_slots[MEMO_SLOTS];
static uint32_t memo_gen = 1;

void hs_py_memo_reset(void) {
  __atomic_add_fetch(&memo_gen, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < MEMO_SLOTS; i++) __atomic_store_n(&memo_slots[i].busy, 0, __ATOMIC_RELEASE);
}

static inline unsigned memo_at(uintptr_t f) {
  return (unsigned)((f * 0x9e3779b97f4a7c15ull) >> 58) & (MEMO_INDEX - 1);
}

static inline __attribute__((always_inline)) uint16_t own_of(const struct hs_py_layout *L, uintptr_t f) {
  if (L->model == HS_PY_MODEL_FRAMEOBJECT) return 0;
  if (L->minor == 11) return *(const volatile uint16_t *)(f + L->fr_is_entry); /* is_entry, owner */
  return (uint8_t)load_i8(f, L->fr_owner);
}

static inline __attribute__((always_inline)) uint64_t instr_of(const struct hs_py_layout *L, uintptr_t f) {
  if (L->model == HS_PY_MODEL_FRAMEOBJECT) return (uint32_t)load_i32(f, L->fr_instr);
  return load_ptr(f, L->fr_instr);
}

/* Entries r, r-1, ..., 1 against the chain from f (== e[r].addr). Returns
 * -1 when every field read is equal out to the root, else the entry that
 * differs. */
static inline __attribute__((always_inline)) int memo_verify(const struct hs_py_layout *L,
                                                             const struct memo_slot *ms, int r,
                                                             uintptr_t f) {
  const unsigned name_off = L->co_qualname ? L->co_qualname : L->co_name;
  for (int i = r; i > 0; i--) {
    const struct memo_entry *e = &ms->e[i];
    if (own_of(L, f) != e->own) return i;
    if (e->code != 0) {
      uintptr_t code = load_ptr(f, L->fr_code);
      if (code != e->code || instr_of(L, f) != e->instr || load_ptr(code, name_off) != e->name ||
          load_ptr(code, L->co_filename) != e->file || load_ptr(code, L->co_lines) != e->lines ||
          load_i32(code, L->co_firstlineno) != e->firstline)
        return i;
    }
    uintptr_t p = load_ptr(f, L->fr_back);
    if (p != e[-1].addr) return i;
    f = p;
  }
  return -1;
}

/* One chain, either model, with or without a memo slot. Long on purpose:
 * it is the per-frame loop of every Python sample, inlined whole; its checks,
 * the memo's matching and the output share one pass over one chain, and
 * split into functions they would reload or pass the walk's state per frame. */
static inline __attribute__((always_inline)) int walk_chain(const struct hs_py_layout *L,
                                                            uintptr_t frame_type,
                                                            uintptr_t code_type, uintptr_t f,
                                                            struct hs_py_frame *out,
                                                            uint64_t *codes, int max, unsigned *w,
                                                            struct memo_slot *ms,
                                                            struct hs_py_walk_info *info) {
  const unsigned name_off = L->co_qualname ? L->co_qualname : L->co_name;
  int n = 0, nf = 0, base = 0, overflow = 0, skip = 0;
  int matching = ms != NULL && ms->m > 0;
  for (int steps = 0; f != 0; steps++) {
    if (n >= max || steps >= MAX_CHAIN_STEPS) {
      *w |= HS_PY_WALK_TRUNCATED;
      break;
    }
    if (!ptr_ok(f, 8)) {
      *w |= HS_PY_WALK_INVALID;
      break;
    }
    if (matching && skip > 0) {
      skip--;
    } else if (matching) {
      unsigned r = ms->index[memo_at(f)];
      if (r != 0 && r <= ms->m && ms->e[r].addr == f) {
        int at = memo_verify(L, ms, (int)r, f);
        int kept = (int)ms->e[r].nemit;
        if (at < 0 && n + kept <= max) {
          if (ms->e[r].gift && n > 0) out[n - 1].flags |= HS_PY_FRAME_ENTRY;
          memcpy(out + n, ms->out + MEMO_OUT - kept, (size_t)kept * sizeof *out);
          n += kept;
          base = (int)r;
          f = 0;
          break;
        }
        /* The frames from here out to the one that differs would fail
         * the same way: walk them the plain way, then look again. */
        skip = at > 0 ? (int)r - at : 0;
        if (at < 0) matching = 0;
      }
    }
    struct memo_entry *rec = NULL;
    if (ms != NULL) {
      if (nf < MEMO_CAP) rec = &ms->fresh[nf++];
      else overflow = 1;
    }
    uint16_t own = own_of(L, f);
    int8_t owner = (int8_t)(L->minor == 11 ? own >> 8 : own);
    uintptr_t back = load_ptr(f, L->fr_back);
    if (rec != NULL) {
      rec->addr = f;
      rec->own = own;
      rec->code = 0;
      rec->emitted = 0;
      rec->gift = 0;
    }
    if (L->model != HS_PY_MODEL_FRAMEOBJECT && owner == OWNED_BY_CSTACK && L->minor >= 12) {
      /* The shim frame _PyEval_EvalFrameDefault pushes under its first
       * frame: what was emitted just before it closes a run. */
      if (n > 0) out[n - 1].flags |= HS_PY_FRAME_ENTRY;
      if (rec != NULL) rec->gift = 1;
      f = back;
      continue;
    }
    uintptr_t code = load_ptr(f, L->fr_code);
    if (L->model == HS_PY_MODEL_FRAMEOBJECT) {
      if (load_ptr(f, L->ob_type) != frame_type || !ptr_ok(code, 8) ||
          load_ptr(code, L->ob_type) != code_type) {
        *w |= HS_PY_WALK_INVALID;
        break;
      }
    } else if (owner < 0 || owner > 2 || !ptr_ok(code, 8) || load_ptr(code, L->ob_type) != code_type) {
      *w |= HS_PY_WALK_INVALID;
      break;
    }
    uint64_t instr = instr_of(L, f);
    int32_t off;
    uint32_t flags = 0;
    int shown = 1;
    if (L->model == HS_PY_MODEL_FRAMEOBJECT) {
      /* 3.8/3.9 count bytes, 3.10 code units; -1 before the first one. */
      int32_t lasti = (int32_t)(uint32_t)instr;
      off = lasti < 0 ? -1 : L->minor == 10 ? lasti * 2 : lasti;
      flags = HS_PY_FRAME_ENTRY;
    } else {
      off = instr_offset(L, code, (uintptr_t)instr);
      if (off == -2) {
        *w |= HS_PY_WALK_INVALID;
        break;
      }
      if (L->minor == 11 && (own & 0xff) != 0) flags |= HS_PY_FRAME_ENTRY;
      if (incomplete(L, code, owner, off)) {
        /* Not shown, but its activation boundary still counts: hand it to
         * the frame emitted before it (or drop it if there is none: the
         * splice then sees one run fewer; documented). */
        if ((flags & HS_PY_FRAME_ENTRY) && n > 0) out[n - 1].flags |= HS_PY_FRAME_ENTRY;
        shown = 0;
      }
    }
    if (rec != NULL) {
      rec->code = code;
      rec->instr = instr;
      rec->name = load_ptr(code, name_off);
      rec->file = load_ptr(code, L->co_filename);
      rec->lines = load_ptr(code, L->co_lines);
      rec->firstline = load_i32(code, L->co_firstlineno);
      rec->emitted = (uint8_t)shown;
      rec->gift = shown ? 0 : (uint8_t)(flags & HS_PY_FRAME_ENTRY);
    }
    if (shown) {
      if (codes == NULL) {
        out[n].code = code;
      } else {
        codes[n] = code;
        if (n > 0 && codes[n - 1] == code)
          out[n].code = out[n - 1].code;
        else if (rec != NULL)
          out[n].code = key_from(code, rec->name, rec->file, rec->lines, rec->firstline);
        else
          out[n].code = key_of(L, code);
      }
      out[n].lasti = off;
      out[n].flags = flags;
      n++;
    }
    f = back;
  }
  if (info == NULL) return n;
  /* The hash from the root: the kept part's, then the frames walked now,
   * outermost first; with a slot, the frames walked now become entries. */
  int kept = ms != NULL ? (int)ms->e[base].nemit : 0;
  info->fresh = n - kept;
  if (ms == NULL || f != 0 || *w != 0 || overflow || base + nf > MEMO_CAP) {
    if (ms != NULL) ms->m = 0;
    info->hash = hs_py_part_hash(out, n);
    return n;
  }
  uint64_t h = ms->e[base].hash;
  uint32_t nem = (uint32_t)kept;
  uint8_t gift = ms->e[base].gift;
  int k = n - kept - 1;
  for (int j = nf - 1; j >= 0; j--) {
    int at = base + nf - j;
    struct memo_entry *d = &ms->e[at];
    const struct memo_entry *src = &ms->fresh[j];
    d->addr = src->addr;
    d->code = src->code;
    d->instr = src->instr;
    d->name = src->name;
    d->file = src->file;
    d->lines = src->lines;
    d->firstline = src->firstline;
    d->own = src->own;
    d->emitted = src->emitted;
    d->gift = src->gift;
    if (d->emitted) {
      h = part_step(h, &out[k]);
      nem++;
      ms->out[MEMO_OUT - nem] = out[k];
      k--;
      gift = 0;
    } else {
      gift |= d->gift;
    }
    d->hash = h;
    d->nemit = nem;
    d->gift = gift;
    ms->index[memo_at(d->addr)] = (uint8_t)at;
  }
  ms->m = (uint32_t)(base + nf);
  info->hash = h;
  return n;
}

/* The walk with the row's offsets as constants: one copy of the loop per
 * row (the rows are static const, and the loops are inlined), a third
 * fewer instructions per frame than reading the offsets from the row. */
#define WALK_ROW(i)                                                                          \
  if (row == &layouts[i])                                                                    \
    return walk_chain(&layouts[i], frame_type, code_type, f, out, codes, max, w, ms, info);
_Static_assert(sizeof layouts / sizeof layouts[0] == 6, "walk_row: one WALK_ROW per row");

static inline __attribute__((always_inline)) int walk_row(const struct hs_py_layout *row,
                                                          uintptr_t frame_type, uintptr_t code_type,
                                                          uintptr_t f, struct hs_py_frame *out,
                                                          uint64_t *codes, int max, unsigned *w,
                                                          struct memo_slot *ms,
                                                          struct hs_py_walk_info *info) {
  WALK_ROW(0)
  WALK_ROW(1)
  WALK_ROW(2)
  WALK_ROW(3)
  WALK_ROW(4)
  WALK_ROW(5)
  return 0;
}

static inline __attribute__((always_inline)) int walk(struct hs_py_frame *out, uint64_t *codes,
                                                      int max, unsigned *why,
                                                      struct hs_py_walk_info *info) {
  unsigned w = 0;
  int n = 0;
  struct memo_slot *ms = NULL;
  if (info != NULL) {
    info->hash = PART_SEED;
    info->fresh = 0;
  }
  if (hs_py_state() != HS_PY_SUPPORTED || !hs_py_rt.is_initialized()) {
    w = HS_PY_WALK_NOSTATE;
    goto done;
  }
  /* The loops below are compiled once per row (walk_row): every offset is
   * a constant of the instructions. */
  const struct hs_py_layout *row = hs_py_rt.lay;
  const uintptr_t code_type = hs_py_rt.code_type, frame_type = hs_py_rt.frame_type;
  uintptr_t ts = (uintptr_t)hs_py_rt.get_tstate();
  if (ts == 0) {
    w = HS_PY_WALK_NOSTATE;
    goto done;
  }
  if (!ptr_ok(ts, 8) || load_ptr(ts, row->ts_thread_id) != (uintptr_t)pthread_self() ||
      !ptr_ok(load_ptr(ts, row->ts_interp), 8)) {
    w = HS_PY_WALK_INVALID;
    goto done;
  }
  uintptr_t f = load_ptr(ts, row->ts_frame);
  if (row->model == HS_PY_MODEL_CFRAME) {
    if (f == 0) goto done;
    if (!ptr_ok(f, 8)) {
      w = HS_PY_WALK_INVALID;
      goto done;
    }
    f = load_ptr(f, row->cf_current);
  }
  if (info != NULL && codes != NULL && max <= MEMO_OUT) {
    /* The thread state's slot, if no other walker holds it. A slot last
     * used by another thread state or session starts empty. */
    struct memo_slot *c = &memo_slots[(ts * 0x9e3779b97f4a7c15ull) >> 58];
    int unheld = 0;
    if (__atomic_compare_exchange_n(&c->busy, &unheld, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
      ms = c;
      uint32_t gen = __atomic_load_n(&memo_gen, __ATOMIC_RELAXED);
      if (c->ts != ts || c->gen != gen) {
        c->m = 0;
        c->ts = ts;
        c->gen = gen;
        c->e[0] = (struct memo_entry){.hash = PART_SEED};
      }
    }
  }
  n = walk_row(row, frame_type, code_type, f, out, codes, max, &w, ms, info);
  if (ms != NULL) __atomic_store_n(&ms->busy, 0, __ATOMIC_RELEASE);
done:
  if (why != NULL) *why = w;
  return n;
}

int hs_py_walk(struct hs_py_frame *out, int max, unsigned *why) {
  return walk(out, NULL, max, why, NULL);
}

int hs_py_walk_keyed(struct hs_py_frame *out, uint64_t *codes, int max, unsigned *why,
                     struct hs_py_walk_info *info) {
  return walk(out, codes, max, why, info);
}
