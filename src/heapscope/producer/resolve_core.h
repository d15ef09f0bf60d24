/*
 * resolve_core.h: stacks -> callsites, in plain C (no Python).
 *
 * The Python path of the same work is bookkeeping/dump.py (ProcessHeap.resolve,
 * FrameTable.frames_of / frames_of_python, CallsiteTrie); this one gives the
 * same frames, in the same order, and the same callsite ids. What it cannot do
 * itself, naming a frame it has not met yet (a module lookup, a Python code
 * object's line), it asks of its caller once per distinct pc or (code, offset)
 * through a callback, in the order the Python path would have interned them.
 *
 *   STACK records (held, ingest_core.h) --resolve--> trie (callsites shared
 *   by every process) --> the process's tracker (hs_tracker_set_callsite)
 *
 * Memory: a stack waits here as its wire record (8 bytes a pc, 16 a Python
 * frame) until it is resolved; then only its callsite id (a table slot) is kept.
 *
 * NB: not thread-safe.
 */
#ifndef HEAPSCOPE_RESOLVE_CORE_H
#define HEAPSCOPE_RESOLVE_CORE_H

#include <stddef.h>
#include <stdint.h>

/* A map of (u64, u64) keys to u64 values: open addressing, linear probing,
 * no deletion. */
struct hs_map_slot {
  uint64_t a, b; /* the key */
  uint64_t val;  /* value + 1; 0 = empty slot */
};

struct hs_map {
  struct hs_map_slot *slots; /* key and value side by side: a probe reads one cache line, not two */
  size_t mask;               /* capacity - 1; 0 before the first put */
  size_t count;
};

int hs_map_put(struct hs_map *m, uint64_t a, uint64_t b, uint64_t value); /* -1 on ENOMEM */
int hs_map_get(const struct hs_map *m, uint64_t a, uint64_t b, uint64_t *value); /* 1 when found */
void hs_map_destroy(struct hs_map *m);

struct hs_u64s {
  uint64_t *p;
  size_t len, cap;
};

int hs_u64s_push(struct hs_u64s *v, uint64_t x); /* -1 on ENOMEM */

/* The callsite trie: one node per distinct path of frames from the root,
 * ids from 1 in creation order (bookkeeping/trie.py). */
struct hs_trie {
  struct hs_map nodes; /* (parent id or 0, frame id) -> node id */
  uint32_t *parent, *frame, *depth; /* by node id - 1 */
  size_t count, cap;
  size_t taken; /* nodes up to this id were handed out by take_new */
};

/* The node of `frame` under `parent` (0: a root), made when missing; -1 on ENOMEM. */
int64_t hs_trie_child(struct hs_trie *t, uint32_t parent, uint32_t frame);
void hs_trie_destroy(struct hs_trie *t);

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

/* The stacks of one process. */
struct hs_resolver {
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

void hs_resolver_destroy(struct hs_resolver *r);

#endif /* HEAPSCOPE_RESOLVE_CORE_H */
