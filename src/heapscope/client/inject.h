/*
 * inject.h: interposition without LD_PRELOAD, for a client loaded into a
 * running process (heapscope_attach). As heaptrack's inject mode does, it
 * rewrites the GOT: every JUMP_SLOT / GLOB_DAT relocation of a malloc-family
 * symbol (and of a mapping call: family.h, HS_MAP_FAMILY) in every loaded object (except this library, the dynamic loader and
 * the vdso) is pointed at our hook. RELRO pages are made writable for the
 * store and read-only again after it. An 8-byte aligned store is atomic on
 * x86_64, so threads of the target calling through an entry see either the
 * old or the new function, both valid.
 *
 * Limits: objects dlopen()ed later are not patched; calls that do not go
 * through a GOT (a static binary, libc's internal direct calls) stay unseen.
 */
#ifndef HEAPSCOPE_CLIENT_INJECT_H
#define HEAPSCOPE_CLIENT_INJECT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Returns the number of GOT entries now pointing at our hooks. */
HS_HIDDEN int hs_inject_hooks(void);

/* One symbol to redirect: its name and the function to call instead. */
struct hs_got_hook {
  const char *name;
  void *hook;
};

/* The same rewrite for one loaded object only (the one whose load base is
 * `base`) and the n symbols of table; unwind.c uses it to take libunwind's
 * memory validation off file descriptors. Returns the entries patched. */
HS_HIDDEN int hs_inject_object(uintptr_t base, const struct hs_got_hook *table, size_t n);

#endif
