/*
 * stacks.h: stack ids, and the set of ids already sent to the producer.
 *
 * stack_id = a 64-bit hash of (depth, pcs, the module generation), never 0. The set is lock-free
 * open addressing in two anonymous mmaps: a first table of 2^15 ids (256
 * KiB, populated in one call at the first insert) that takes the first 2^14 ids,
 * then a big one of 2^20 (8 MiB of address space on a 2 MiB boundary, in
 * transparent huge pages where the system gives them: stacks.c, map_table).
 * Why: with the big table alone, every id landed on a page of its
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

/* One step of a stack id: rotate, xor, multiply, a bijection of the state
 * for a given value and of the value for a given state. */
static inline uint64_t hs_id_step(uint64_t h, uint64_t v) {
  return (((h << 23) | (h >> 41)) ^ v) * UINT64_C(0x9e3779b97f4a7c15);
}

/* The final mix of a stack id. */
static inline uint64_t hs_id_mix(uint64_t h) {
  h ^= h >> 32;
  h *= UINT64_C(0xd6e8feb86659fd93);
  h ^= h >> 32;
  h *= UINT64_C(0xd6e8feb86659fd93);
  h ^= h >> 32;
  return h;
}

HS_HIDDEN uint64_t hs_stack_id(const uint64_t *pcs, uint32_t depth);

/* The id of a stack with Python frames: the native part's id (hs_stack_id),
 * the number of Python frames and their hash (hs_py_part_hash, built by the
 * walk), one step and the mix: one native part under different Python
 * callers makes different stacks. Never 0. */
static inline uint64_t hs_stack_id_py(uint64_t native, uint32_t n, uint64_t part) {
  uint64_t h = hs_id_mix(hs_id_step(native ^ (UINT64_C(0xbb67ae8584caa73b) + n), part));
  return h ? h : 1;
}

/* Maps the tables, unmapping those of an earlier call (a fork child's
 * restart: its parent's ids were sent to the parent's session). Only while
 * no other thread can intern. -HS_ERR_OUT_OF_MEMORY on failure (then every
 * lookup says HS_STACK_FULL, which is still correct, only slower). */
HS_HIDDEN HS_MUST_CHECK int hs_stacks_init(void);

HS_HIDDEN HS_MUST_CHECK enum hs_intern hs_stacks_intern(uint64_t stack_id);

/* A module was replaced by another at its addresses (modules.c): the ids of
 * stacks computed from now on differ from those of the same pcs before, so
 * none is taken for a stack already sent (whose frames are the old module's). */
HS_HIDDEN void hs_stacks_new_generation(void);

#endif
