/*
 * pymem.h: Python's own allocator domains, sampled like malloc
 * (docs/python-frames.md section 5).
 *
 * Small Python objects (512 bytes or less) never reach malloc: pymalloc
 * carves them out of arenas it maps itself. hs_pymem_install() wraps the
 * MEM and OBJ domains with PyMem_SetAllocator: each wrapper calls the
 * allocator it replaced, with the reentrancy guard set (so a request that
 * pymalloc passes on to malloc is not seen a second time by the malloc
 * hook), then books the request through the same per-thread sampler as
 * malloc. The RAW domain is malloc itself and stays as it is.
 */
#ifndef HEAPSCOPE_CLIENT_PYMEM_H
#define HEAPSCOPE_CLIENT_PYMEM_H

#include "common.h"

/* Called by a late install (below): with -1 first, before anything is
 * touched (return 0 to call it off: the session is over), then with 1 when
 * the wrappers went in, 0 when they could not. */
typedef int (*hs_pymem_late_fn)(int installed);

/* Installs the wrappers when CPython is in the process. Not hook-safe
 * (dlsym). Before Py_Initialize (the client's start-up, before main): now,
 * unless PYTHONMALLOC is set (pre-initialization would then pick allocators
 * again). In a running interpreter (an attach, a libpython dlopen()ed and
 * initialized later): later, from Py_AddPendingCall, which the main thread
 * runs between two bytecodes with the GIL held, so no thread is inside a
 * domain while it changes; `late` is then told. Nothing waits for it.
 * Returns 1 when installed, 2 when the install is pending, 0 when not. */
HS_HIDDEN int hs_pymem_install(hs_pymem_late_fn late);

/* Installs the wrappers now, in a running interpreter: the caller holds the
 * GIL in a pending call (session.c, an interpreter loaded after the start).
 * late(-1) is asked first, as above, and not told the outcome. Not
 * hook-safe (dlsym). Returns 1 when installed, 0 when not. */
HS_HIDDEN int hs_pymem_install_now(hs_pymem_late_fn late);

/* A new session's interval (a fork child's: session.c, restart_in_child),
 * when the wrappers are already in: the fast path serves only requests
 * below it. Call with no other thread in a domain (one thread). */
HS_HIDDEN void hs_pymem_session(uint64_t interval);

#endif
