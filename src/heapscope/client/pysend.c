/* pysend.c: see pysend.h. */
#include "pysend.h"

#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#include "modules.h"
#include "own.h"
#include "pyframes.h"
#include "ring.h"
#include "stacks.h"
#include "state.h"

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

/* Scratch buffers for copying a code object out, taken with a CAS: no lock.
 * When all are busy a thread copies into a small buffer on its own stack
 * (the names or the table may then be cut; the record says so). */
struct code_slot {
  int busy;
  char buf[CODE_NAME_CAP + CODE_FILE_CAP + CODE_TABLE_CAP];
};
static struct code_slot *code_slots;
int hs_py_on;

int hs_py_send_code(uint64_t code, uint64_t key) {
  struct hs_ring_meta *m = hs_session.ring.meta;
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
  uint64_t room = hs_session.ring.size / 4 - sizeof(struct hs_pycode) - 16;
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
    rc = hs_ring_write(&hs_session.ring, HS_REC_PYCODE, &rec, sizeof rec, buf,
                       (size_t)info.name_len + info.file_len + info.table_len, 0);
    if (rc == HS_OK)
      __atomic_fetch_add(&m->python_codes_sent, 1, __ATOMIC_RELAXED);
  }
  if (slot)
    __atomic_store_n(&slot->busy, 0, __ATOMIC_RELEASE);
  return rc < 0 ? rc : HS_OK;
}


/* None when the mapping fails: send_code then copies through a smaller
 * buffer on its stack. */
void hs_py_map_code_slots(void) {
  void *mem = mmap(NULL, CODE_SLOTS * sizeof(struct code_slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  code_slots = mem == MAP_FAILED ? NULL : mem;
  hs_own_map(code_slots, CODE_SLOTS * sizeof(struct code_slot), HS_OWN_PRIVATE);
}

int hs_py_code_slots_mapped(void) { return code_slots != NULL; }

void hs_py_send_reset(void) {
  for (int i = 0; code_slots != NULL && i < CODE_SLOTS; i++)
    code_slots[i].busy = 0;
}

/* ---- an interpreter loaded later (docs/python-frames.md) ----
 *
 * A program that dlopen()s a shared libpython after the start and then runs
 * Py_Initialize (an embedded interpreter): the session's start found
 * nothing (session.c, python_init). A
 * module scan that meets a libpython3 notes its dynamic symbol table
 * (modules.c); the next sampled allocation (at most once a millisecond)
 * looks up Py_IsInitialized and Py_AddPendingCall there without dlsym, and
 * once the interpreter is initialized queues the session's install
 * (session.c, late_install; given by hs_py_late_init), which the main
 * thread runs between two bytecodes with the GIL held, outside any hook, as
 * CPython runs its own imports' dlopen and dlsym: there detection (dlsym),
 * the domain wrappers (pymem.c) and the frame walker go in. Nothing waits:
 * when the main thread never runs Python again, nothing is installed. A
 * queue that stays full is asked LATE_MAX_TRIES times, then given up. */
int hs_py_late;               /* HS_LATE_* (pysend.h) */
static hs_py_install_fn late_install; /* session.c's, run by the pending call */
static uint64_t late_last_ns; /* the last look (rate limit) */
static uint32_t late_tries;   /* failed Py_AddPendingCall */
#define LATE_EVERY_NS 1000000u
#define LATE_MAX_TRIES 100u

typedef int (*late_add_fn)(int (*fn)(void *), void *arg);

void hs_py_late_init(hs_py_install_fn install) { late_install = install; }

/* Inside the loader's iteration (modules.c): libpython stays mapped. 0:
 * queued, 1: not initialized yet, -1: the queue is full, -2: no symbols. */
static int late_queue(hs_modules_lookup_fn lookup, void *arg) {
  (void)arg;
  int (*initialized)(void) = (int (*)(void))lookup("Py_IsInitialized");
  late_add_fn add = (late_add_fn)lookup("Py_AddPendingCall");
  if (!initialized || !add || !late_install)
    return -2;
  if (!initialized())
    return 1;
  return add(late_install, NULL) == 0 ? 0 : -1;
}

/* From a sampled allocation: the guard is set, no client lock is held. */
void hs_py_late_poll(void) {
  uint64_t now = hs_coarse_ns();
  uint64_t last = __atomic_load_n(&late_last_ns, __ATOMIC_RELAXED);
  if (now - last < LATE_EVERY_NS ||
      !__atomic_compare_exchange_n(&late_last_ns, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return;
  int expected = HS_LATE_WATCH;
  if (!__atomic_compare_exchange_n(&hs_py_late, &expected, HS_LATE_BUSY, 0, __ATOMIC_ACQUIRE,
                                   __ATOMIC_RELAXED))
    return;
  int rc = hs_modules_with_libpython(late_queue, NULL);
  if (rc == 0) {
    hs_debug("libpython loaded after the start: install queued", UINT64_MAX);
    return; /* stays BUSY: late_install ends it */
  }
  if (rc == 1 || (rc == -1 && ++late_tries < LATE_MAX_TRIES)) {
    __atomic_store_n(&hs_py_late, HS_LATE_WATCH, __ATOMIC_RELEASE);
    return;
  }
  __atomic_store_n(&hs_py_late, HS_LATE_OFF, __ATOMIC_RELEASE);
  hs_debug("libpython loaded after the start: not installed", UINT64_MAX);
}
