/*
 * modules.h: the loaded ELF objects, sent as HS_REC_MODULE records.
 *
 * All objects are sent by the constructor. Afterwards (dlopen), a new stack
 * whose pcs are not all covered by a known object's executable segment
 * triggers a rescan (at most one per millisecond; a skipped one is done at
 * the next chance or at exit), which sends the objects not seen before.
 * An object is known by its addresses and its identity (build id, path):
 * one found where known ones are (a dlclose, then a dlopen of another
 * there) replaces them, is sent, and starts a new generation of stack ids
 * (stacks.h). The program's dlclose goes through ours, which starts that
 * generation at the unload; a new stack in an object loaded after the start
 * looks at the loader's unload count and rescans at once when it moved.
 * The producer takes the stacks before that MODULE in the ring as the old
 * object's: a thread whose stack in the new object is sent while another
 * thread's scan still merges (the try-lock below) may be named by the old.
 * Attached by dlopen (the program's calls bound to the C library's
 * dlclose), a stack of the very pcs of one sent before the unload keeps its
 * id, and its old names.
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

/* The rescan a check left pending (one a millisecond), once that millisecond
 * has passed: called on every sample, also of a stack already sent (a loop in
 * a library dlopened within a millisecond of another repeats its one stack;
 * its module came only at the exit's flush). One load when nothing waits. */
HS_HIDDEN extern int hs_rescan_pending;
HS_HIDDEN HS_MUST_CHECK int hs_modules_poll_slow(struct hs_ring *r);
static inline HS_MUST_CHECK int hs_modules_poll(struct hs_ring *r) {
  if (HS_LIKELY(!__atomic_load_n(&hs_rescan_pending, __ATOMIC_RELAXED)))
    return HS_OK;
  return hs_modules_poll_slow(r);
}

/* A libpython3 loaded after the start (an embedded interpreter):
 * a scan that sees one notes its dynamic symbol table. Its symbols are then
 * found without dlsym (which takes the loader lock and may allocate): by a
 * lookup of its DT_GNU_HASH table, hook-safe. */
HS_HIDDEN int hs_modules_libpython_seen(void);
HS_HIDDEN const char *hs_modules_libpython_path(void); /* NULL until seen */

/* Calls fn(lookup, arg) while libpython is certainly mapped (inside
 * dl_iterate_phdr, the loader lock held: fn must not call the loader) and
 * returns what fn returned; -1 when no libpython is (or is still) loaded.
 * lookup(name) is the hook-safe symbol lookup (NULL: not found). Never
 * called with a client lock held (as hs_modules_scan). */
typedef void *(*hs_modules_lookup_fn)(const char *name);
typedef int (*hs_modules_py_fn)(hs_modules_lookup_fn lookup, void *arg);
HS_HIDDEN int hs_modules_with_libpython(hs_modules_py_fn fn, void *arg);

/* The loader's count of objects unloaded so far (dl_iterate_phdr's dlpi_subs):
 * hooks.c's dlclose compares it around the real call. */
HS_HIDDEN unsigned long long hs_modules_loader_subs(void);

#endif
