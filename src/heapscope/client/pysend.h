/*
 * pysend.h: what a sample's Python frames need beyond the CPython walker
 * (pyframes.h; docs/python-frames.md): the code objects sent once per
 * session, and the watch for an interpreter loaded after the start. The
 * walk itself is made by record.c (python_frames, inlined into the sample
 * path). Called by the sampler (record.c) under the guard; set
 * up by the session (session.c).
 */
#ifndef HEAPSCOPE_CLIENT_PYSEND_H
#define HEAPSCOPE_CLIENT_PYSEND_H

#include <stdint.h>

#include "common.h"
#include "wire.h"

/* CPython with a known layout: samples walk its frames. Set before
 * hs_enabled, or (release) by the late install (session.c). */
extern int hs_py_on HS_HIDDEN;

/* Sends code object `code` (its address) under key as an HS_REC_PYCODE:
 * its names and raw line table, copied through one of the code slots (or
 * a smaller buffer on the stack when all are busy). Under the guard.
 * Returns HS_OK (a code object that cannot be read is counted, not sent)
 * or a negative client error. */
HS_HIDDEN HS_MUST_CHECK int hs_py_send_code(uint64_t code, uint64_t key);

/* The code objects' copy slots, once Python is found (at start or later);
 * none when the mapping fails (a smaller buffer on the stack is used). */
HS_HIDDEN void hs_py_map_code_slots(void);
HS_HIDDEN int hs_py_code_slots_mapped(void);

/* A fork child's new session: the code-copy slots freed. */
HS_HIDDEN void hs_py_send_reset(void);

/* ---- an interpreter loaded later (pysend.c) ---- */

enum { HS_LATE_WATCH = 0, HS_LATE_BUSY = 1, HS_LATE_OFF = 2 };
/* HS_LATE_*: OFF once CPython is found or given up. */
extern int hs_py_late HS_HIDDEN;

/* The install that a pending call runs on the main thread (session.c); set
 * before sampling starts. Returns 0. */
typedef int (*hs_py_install_fn)(void *arg);
HS_HIDDEN void hs_py_late_init(hs_py_install_fn install);

/* From a sampled allocation, when hs_py_late is HS_LATE_WATCH and a
 * libpython was seen (modules.c): the guard is set, no client lock held. */
HS_HIDDEN void hs_py_late_poll(void);

/* Watching is over (the install ran, or CPython was found at the start). */
static inline void hs_py_late_stop(void) {
  __atomic_store_n(&hs_py_late, HS_LATE_OFF, __ATOMIC_RELEASE);
}

#endif
