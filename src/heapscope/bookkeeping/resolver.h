/*
 * resolver.h: the stacks of one process, kept and resolved to callsites, in
 * plain C (no Python).
 *
 *   STACK records (the ring reader, producer/ingest_core.h, keeps each one
 *   here as it reads it) --resolve--> trie (callsites shared by every
 *   process, trie.h) --> the process's tracker (hs_tracker_set_callsite)
 *
 * What it cannot do itself, naming a frame it has not met yet (a module
 * lookup, a Python code object's line), it asks of its caller once per
 * distinct pc or (code, offset) through a callback (bookkeeping/frames.py
 * FrameTable.namer). tests/reference_resolve.py does the same work in Python,
 * only to check this one (tests/unit/producer/test_resolve.py).
 *
 * Memory: a stack waits here as its wire record (8 bytes a pc, 16 a Python
 * frame) until it is resolved; then only its callsite id (a table slot) is
 * kept. A recording that keeps no profile never resolves: its stacks stay
 * here as records, read by id (hs_resolver_held; the pytest plugin's windows).
 *
 * NB: not thread-safe.
 */
#ifndef HEAPSCOPE_RESOLVER_H
#define HEAPSCOPE_RESOLVER_H

#include <stddef.h>
#include <stdint.h>

#include "hashmap.h"
#include "tracker.h"
#include "trie.h"

/* A frame id as the namer returns it: the id in the low 32 bits, and: */
#define HS_FID_FILTERED (1ull << 32) /* a FILTERED frame: runs of it collapse to one */
#define HS_FID_NOCACHE (1ull << 33)  /* an answer for now only (a code object not received yet) */

/* What the namer is asked to name. */
enum hs_name_kind {
  HS_NAME_PC = 0,       /* a = return address (FrameTable._intern_pc(pc)) */
  HS_NAME_PYFRAME = 1,  /* a = code key, b = instruction offset (FrameTable._python_frame) */
  HS_NAME_NO_FRAMES = 2 /* the frame of an empty stack (dump.py NO_FRAMES) */
};

/* Names one frame: its id with HS_FID_* flags, or < 0 when it failed (the
 * resolve stops there; the caller's error stands). A pc may also be answered
 * 0, "not now": its stack waits for a later resolve (a module not known yet). */
typedef int64_t (*hs_namer)(void *ctx, int kind, uint64_t a, int64_t b);

struct hs_resolver {
  /* The records kept, whole (header included), one after another in `arena`,
   * found by stack id through an open-addressing index (linear probing, keys
   * mixed as the tracker's tables). A stack defined again points at its
   * latest record. */
  struct hs_buf arena;
  uint64_t *ids;        /* slot -> stack id */
  uint64_t *offs_plus1; /* slot -> offset of its record in arena + 1; 0 = empty */
  size_t mask;          /* capacity - 1; 0 before the first record */
  size_t count;
  /* The resolve's state. */
  struct hs_map pcs;       /* pc -> frame id | flags */
  struct hs_map pyframes;  /* (code key, offset) -> frame id | flags, codes received only */
  struct hs_map codes;     /* code keys received (HS_REC_PYCODE) */
  struct hs_map callsites; /* stack id -> callsite id */
  struct hs_u64s native, python; /* waiting stack ids, in order of first definition */
  /* Waiting for a module not known yet (a pc answered "not now"): tried again
   * only when the caller says something changed (hs_splice.retry_parked). */
  struct hs_u64s parked;
  uint64_t no_frames;      /* frame id | flags of an empty stack; 0 = not named yet */
  uint32_t *path;          /* scratch: one stack's frames */
  size_t path_cap;
};

/* Where the splice of Python frames puts them (frames.py frames_of_python). */
struct hs_splice {
  uint64_t eval_lo, eval_hi;  /* a pc in (lo, hi] is an eval loop activation */
  uint64_t interp_start, interp_end; /* the interpreter's object: [start, end) */
  int wait;                   /* a stack naming a code object not received yet waits */
  int retry_parked;           /* the parked stacks are tried again (first, in the order they parked) */
};

/* Is the body of a STACK record (after its 8-byte header) well formed? */
int hs_resolver_record_ok(const uint8_t *body, uint64_t body_size);
/* Keep one STACK record (header included; hs_resolver_record_ok). A stack
 * already resolved keeps its callsite; one defined again while it waits
 * waits as last defined. -1 on ENOMEM. */
int hs_resolver_keep(struct hs_resolver *s, const uint8_t *rec, uint32_t size);
/* The kept record of stack_id, its size in *size; NULL when none is kept. */
const uint8_t *hs_resolver_held(const struct hs_resolver *s, uint64_t stack_id, uint32_t *size);
/* A Python code object of the process was received. -1 on ENOMEM. */
int hs_resolver_define_code(struct hs_resolver *s, uint64_t key);
/* Forget the frame named for every pc: another object is now where one was,
 * and its pcs are named again as they next come (through the namer). */
void hs_resolver_forget_pcs(struct hs_resolver *s);
/* Resolve the waiting stacks: each gets its callsite in `trie` and in
 * `tracker`; a Python stack naming a code object not received yet waits
 * when sp->wait. The number resolved; -1 when the namer failed, -2 on ENOMEM
 * (the stacks not resolved then wait). Records of resolved stacks are let
 * go. *unplaced grows by the Python frames put at the root. */
int64_t hs_resolver_resolve(struct hs_resolver *s, struct hs_trie *trie, struct hs_tracker *tracker,
                          const struct hs_splice *sp, hs_namer namer, void *ctx, uint64_t *unplaced);
/* The frames of a kept stack, as a resolve would put it in the trie (root
 * first, runs of a FILTERED frame collapsed, Python frames not received yet
 * named as they are), without resolving it: the number of frame ids left in
 * s->path (valid until the next call); -3 when the stack is not kept (never
 * received, or resolved) or a pc is answered "not now"; -1 when the namer
 * failed; -2 on ENOMEM. For a reader of a few stacks by id (the pytest
 * plugin, which keeps no profile). */
int64_t hs_resolver_frames(struct hs_resolver *s, uint64_t stack_id, const struct hs_splice *sp, hs_namer namer,
                           void *ctx);
/* The callsite of a resolved stack; 0 when it has none. */
int64_t hs_resolver_callsite(const struct hs_resolver *s, uint64_t stack_id);
void hs_resolver_destroy(struct hs_resolver *s);

#endif /* HEAPSCOPE_RESOLVER_H */
