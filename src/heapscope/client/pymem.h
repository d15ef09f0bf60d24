/*
 * pymem.h: Python's own allocator domains, sampled like malloc (issue 12,
 * requirement 2; docs/python-frames.md section 5).
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

/* Installs the wrappers when CPython is in the process, has not been
 * initialized yet (the client's start-up, before main), and PYTHONMALLOC
 * is unset (pre-initialization would then pick allocators again). Not
 * hook-safe (dlsym). Returns 1 when installed. */
HS_HIDDEN int hs_pymem_install(void);

#endif
