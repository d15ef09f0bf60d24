/*
 * stacks.h: stack ids, and the set of ids already sent to the producer.
 *
 * stack_id = a 64-bit hash of (depth, pcs), never 0. The set is lock-free
 * open addressing in two anonymous mmaps: a first table of 2^15 ids (256
 * KiB, populated in one call at the first insert) that takes the first 2^14 ids,
 * then a big one of 2^20 (8 MiB of address space, touched page by page).
 * Issue 13: with the big table alone, every id landed on a page of its
 * own at random, and each of its 2,048 pages cost two faults (the probe's
 * read mapped the zero page, the insert's write copied it): 4,084 faults in
 * cc1plus -fsyntax-only, its 12k stacks, where the first table costs one
 * madvise call of 64 pages and stays in the L2 cache and a few TLB entries.
 * Insertion is a CAS from 0; nothing is ever deleted. The thread whose CAS
 * inserts an id is the one that sends its HS_REC_STACK (before its own
 * HS_REC_MALLOC); the others send only the MALLOC: the producer tolerates a
 * MALLOC that arrives before its STACK, and a STACK sent twice.
 */
#ifndef HEAPSCOPE_CLIENT_STACKS_H
#define HEAPSCOPE_CLIENT_STACKS_H

#include <stdint.h>

#include "common.h"
#include "wire.h"

enum hs_intern {
  HS_STACK_KNOWN = 0, /* already sent (or being sent by another thread) */
  HS_STACK_NEW = 1,   /* this caller inserted it: send the STACK record */
  HS_STACK_FULL = 2,  /* no room: send the STACK record every time */
};

HS_HIDDEN uint64_t hs_stack_id(const uint64_t *pcs, uint32_t depth);

/* Maps the table. -HS_ERR_OUT_OF_MEMORY on failure (then every lookup says
 * HS_STACK_FULL, which is still correct, only slower). */
HS_HIDDEN HS_MUST_CHECK int hs_stacks_init(void);

HS_HIDDEN HS_MUST_CHECK enum hs_intern hs_stacks_intern(uint64_t stack_id);

#endif
