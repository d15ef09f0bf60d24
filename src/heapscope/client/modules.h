/*
 * modules.h: the loaded ELF objects, sent as HS_REC_MODULE records.
 *
 * All objects are sent by the constructor. Afterwards (dlopen), a new stack
 * whose pcs are not all covered by a known object's executable segment
 * triggers a rescan (at most one per millisecond; a skipped one is done at
 * the next chance or at exit), which sends the objects not seen before.
 *
 * Never called with a client lock held: dl_iterate_phdr takes the loader
 * lock, and another thread may hold that lock while it mallocs. The scan
 * collects into a private buffer first; the merge into the known table (and
 * the sending) then happens under a try-lock that nobody waits on.
 */
#ifndef HEAPSCOPE_CLIENT_MODULES_H
#define HEAPSCOPE_CLIENT_MODULES_H

#include <stdint.h>

#include "common.h"
#include "ring.h"

HS_HIDDEN HS_MUST_CHECK int hs_modules_init(void);

/* Scans now and sends what is new. Status as hs_ring_write. */
HS_HIDDEN HS_MUST_CHECK int hs_modules_scan(struct hs_ring *r);

/* Called for every new stack: rescans when a pc is outside every known
 * object (rate limited). Status as hs_ring_write. */
HS_HIDDEN HS_MUST_CHECK int hs_modules_check(struct hs_ring *r, const uint64_t *pcs,
                                             uint32_t depth);

/* A rescan that was skipped by the rate limit, done now (at exit). */
HS_HIDDEN HS_MUST_CHECK int hs_modules_flush(struct hs_ring *r);

#endif
