/*
 * tracker.h: the heap tracker of one process, in plain C (no Python).
 *
 *   malloc/free + seq --seq order--> live table   addr -> sampled allocation
 *   (hs_tracker_malloc/free)     |-> buckets      cumulative totals per callsite
 *                                |                (per stack until its callsite is known)
 *                                \-> peak         the process's largest sampled
 *                                                 unreleased bytes, and every
 *                                                 bucket's totals at that moment
 *   hs_tracker_dump() --> rows of what changed per callsite since the last dump
 *   hs_tracker_peak() --> rows of the state at the peak
 *   hs_tracker_new_window() / hs_tracker_window() --> what one stretch of
 *                          time (a test) added: at its own peak, and at its end
 *   hs_tracker_threads() --> totals per (stack, thread), when asked for at
 *                          the start (hs_tracker_keep_threads: the live view)
 *
 * The producer's ring reader (producer/ingest_core.c) feeds it the MALLOC
 * and FREE records of one process; the Python side (bookkeeping/dump.py)
 * tells it each stack's callsite once, when the stack is resolved, and
 * reads dump rows. Totals are therefore summed per callsite once, here.
 *
 * Sequence order. MALLOC and FREE carry a per-process gapless sequence
 * number taken before the ring write, so ops of different threads arrive out
 * of order; an op waits in tracker_order.h's heap until its predecessors are
 * applied. A missing seq is given up on when the op after it has waited
 * HS_GAP_TIMEOUT_NS by the caller's clock (now_ns: the tracker reads no
 * clock itself), or at hs_tracker_flush().
 *
 * The peak (heapprofd's dump_at_max, kept always). A malloc that takes the
 * sampled unreleased bytes above their maximum makes a new peak. Rather than
 * copy every bucket at each new peak, peaks are numbered (`peak_epoch`) and
 * each bucket remembers the peak of its last change (`epoch`): a bucket not
 * changed since the latest peak still holds its state there in `cur`; its
 * first change after it saves `cur` into `at_peak` before applying. A new
 * peak is O(1), an op O(1).
 *
 * Windows the same way. A window's start is a new peak epoch, remembered
 * (`win_epoch`): a bucket whose last change is older (epoch < win_epoch)
 * has not changed in the window, so its state at the start is still `cur`;
 * the first change after the start (the first after a peak, as the window's
 * start is one) saves `cur` into win_start before applying, in the same rare
 * branch that saves at_peak. A new window is O(1) (after the first, which
 * allocates win_start for every bucket), and an op pays nothing more.
 *
 * One peak for several heaps, their sum's. The peak state (struct hs_peak:
 * running total, maximum, its ts, the epoch) lives apart from the tracker
 * and can be shared by the trackers of one process's heaps
 * (hs_tracker_share_peak): libc.malloc's and python.pymalloc's, disjoint
 * heaps whose sum is the program's memory. Their peak is then the moment
 * the sum of their sampled unreleased bytes is largest: any member's malloc
 * that takes the sum above its maximum starts a new epoch for all of them,
 * and each bucket's lazy at_peak save works as before, so every member's
 * peak rows (hs_tracker_peak, dump_at_max dumps, windows) are its state at
 * that one moment. Still O(1) per op: one pointer more.
 *
 * Threads. Each malloc carries its thread's kernel id (0 = not known). Only
 * a tracker told to (hs_tracker_keep_threads, before its first op) keeps
 * totals per (stack, thread): one more hash lookup per malloc, which a plain
 * recording does not pay. Its live allocations point at their (stack,
 * thread) key instead of their stack, so a free is booked to the thread
 * that allocated the block, without a lookup. The totals are per stack, not
 * per callsite, so folding a stack into its callsite leaves them alone;
 * hs_tracker_threads() names each row's callsite when it is known.
 *
 * Every row type handed to Python is declared here once; bookkeeping/rows.py
 * mirrors them and tests/unit/bookkeeping/test_rows.py checks both against
 * the compiler.
 *
 * NB: not thread-safe; the caller serialises calls, to all the trackers
 * sharing a peak at once (an op on one writes their struct hs_peak).
 */
#ifndef HEAPSCOPE_TRACKER_H
#define HEAPSCOPE_TRACKER_H

#include <stddef.h>
#include <stdint.h>

#include "tracker_lifetime.h"
#include "tracker_order.h"
#include "tracker_series.h"
#include "tracker_tables.h"

/* Ops that waited this long (by the caller's now_ns) no longer wait for a missing seq. */
#define HS_GAP_TIMEOUT_NS 1000000000ull

/* The kinds of hs_stream_row. */
#define HS_OP_MALLOC 1u
#define HS_OP_FREE 2u

struct hs_buf {
  uint8_t *p;
  size_t len;
  size_t cap;
};

/* Make room for `more` bytes after len. -1 on ENOMEM. */
int hs_buf_reserve(struct hs_buf *b, size_t more);

/* Cumulative counters of sampled allocations; bytes are sample sizes, the
 * real ones are the sizes the program asked for (for heapscope/estimate.py). */
struct hs_totals {
  uint64_t alloc_bytes;
  uint64_t free_bytes;
  uint64_t alloc_count;
  uint64_t free_count;
  uint64_t alloc_real;
  uint64_t free_real;
};

/* A bucket of totals, in two parallel arrays: what every op reads and
 * writes (64 bytes, one cache line), and the rest. */
struct hs_bucket {
  struct hs_totals cur;
  uint64_t epoch;       /* peak_epoch at its last change */
  uint32_t into_plus1;  /* a stack bucket folded into its callsite's: that one + 1 */
  uint32_t stack_idx;   /* a stack's bucket (callsite_id 0): that stack */
};

struct hs_bucket_rest {
  struct hs_totals at_peak; /* the state at the peak, when epoch == peak_epoch */
  struct hs_totals dumped;  /* what the last dump reported (callsite buckets) */
  uint64_t callsite_id;     /* 0: the bucket of one stack whose callsite is not known yet */
};

/* ---- rows handed to Python (mirrored in bookkeeping/rows.py) ---- */

/* hs_tracker_dump(): one change of one callsite since the previous dump.
 * New allocations give a row with count, size >= 0, new frees one with
 * count, size <= 0, so summing rows up to a dump gives what is unreleased. */
struct hs_dump_row {
  uint64_t callsite_id;
  int64_t count;
  int64_t size;
  int64_t real_size; /* the real sizes of the same samples */
};

/* hs_tracker_peak(): one callsite at the process's peak, cumulative. */
struct hs_peak_row {
  uint64_t callsite_id;
  uint64_t count;       /* sampled allocations not freed at the peak */
  uint64_t size;        /* their sampled bytes */
  uint64_t alloc_count; /* sampled allocations made up to the peak */
  uint64_t alloc_size;  /* their sampled bytes */
  uint64_t real_size;       /* the real sizes of the samples not freed at the peak */
  uint64_t alloc_real_size; /* ... of the samples made up to the peak */
};

/* hs_tracker_window(): one bucket's change since hs_tracker_new_window(),
 * for buckets that changed. A callsite's, or a stack's whose callsite is not
 * known yet (callsite_id 0). */
struct hs_window_row {
  uint64_t callsite_id;
  uint64_t stack_id;
  int64_t peak_size;  /* sampled unreleased bytes at the window's peak, minus at its start */
  int64_t peak_count;
  int64_t end_size;   /* ... now, minus at its start */
  int64_t end_count;
  uint64_t alloc_size; /* sampled bytes allocated since its start */
};

/* hs_tracker_totals(): one bucket now. A callsite's (stack_id 0), or a
 * stack's whose callsite is not known yet (callsite_id 0). */
struct hs_totals_row {
  uint64_t callsite_id;
  uint64_t stack_id;
  uint64_t alloc_bytes;
  uint64_t free_bytes;
  uint64_t alloc_count;
  uint64_t free_count;
  uint64_t alloc_real; /* the real sizes of the same samples (for heapscope/estimate.py) */
  uint64_t free_real;
};

/* hs_tracker_live(): one live sampled allocation. */
struct hs_live_row {
  uint64_t addr;
  uint64_t sample_size;
  uint64_t alloc_size;
  uint64_t stack_id;
  uint64_t seq; /* of its malloc */
};

/* hs_tracker_threads(): one (stack, thread) pair's totals now, with the
 * stack's callsite when it is known (else 0). Bytes are sample sizes. */
struct hs_thread_row {
  uint64_t callsite_id;
  uint64_t stack_id;
  uint64_t tid;
  uint64_t alloc_bytes;
  uint64_t free_bytes;
  uint64_t alloc_count;
  uint64_t free_count;
  uint64_t alloc_real; /* the real sizes of the same samples */
  uint64_t free_real;
};

/* The stream (stream=1): one op as applied. For a free, sizes and stack are
 * those of the allocation it freed (0 if the address was not live), ts 0 (the
 * Chrome JSON export replays the stream up to a dump by the mallocs' ts only). */
struct hs_stream_row {
  uint64_t kind; /* HS_OP_MALLOC or HS_OP_FREE */
  uint64_t seq;
  uint64_t addr;
  uint64_t alloc_size;
  uint64_t sample_size;
  uint64_t stack_id;
  uint64_t ts;
};

struct hs_tracker_stats {
  uint64_t late_records;    /* ops whose seq was already committed */
  uint64_t gaps_skipped;    /* sequence numbers given up on */
  uint64_t implicit_frees;  /* a malloc at an address still live */
  uint64_t untracked_frees; /* a free of an address not live */
  uint64_t max_pending;
};

/* The peak of one or more trackers (see "One peak for several heaps" above);
 * owned by its members, freed with the last. */
#define HS_PEAK_MEMBERS 8
struct hs_tracker;
struct hs_peak {
  uint64_t cur_unfreed; /* sampled bytes not freed now, over the members */
  uint64_t max_unfreed; /* ... at the peak (of the current window) */
  uint64_t max_ts;      /* ts of the malloc that made the peak */
  uint64_t peak_epoch;  /* peaks reached so far */
  uint64_t win_epoch;   /* peak_epoch at the current window's start; 0: no window yet */
  uint64_t win_base;     /* cur_unfreed at the window's start */
  uint64_t best_unfreed; /* the process's peak, when an earlier window held it (members' best rows) */
  uint64_t best_ts;
  struct hs_tracker *members[HS_PEAK_MEMBERS];
  uint32_t n;
  uint32_t busy; /* the caller's: members in use outside its lock (producer/_ingest.c's drain) */
};

struct hs_labels; /* tracker_labels.h */
struct hs_tracker {
  int stream;      /* keep hs_stream_rows for take_stream */
  int dump_at_max; /* dumps report the state at the peak (heapprofd §5.3) */
  int threads;     /* keep totals per (stack, thread) (hs_tracker_keep_threads) */
  int oom;         /* an allocation failed; an op or a row was dropped */
  uint64_t committed_seq;
  uint64_t last_ts; /* largest MALLOC ts applied */
  struct hs_tracker_stats st;
  struct hs_live_table live;
  struct hs_stacks stacks;    /* stack id -> its bucket */
  struct hs_stacks callsites; /* callsite id -> its bucket (the same table type) */
  struct hs_pending pending;
  struct hs_bucket *buckets;
  struct hs_bucket_rest *rest; /* parallel to buckets */
  size_t nbuckets;
  size_t buckets_cap;
  /* the peak, shared with the other heaps of the process (hs_tracker_share_peak) or its own */
  struct hs_peak *pk;
  uint64_t cur_unfreed; /* this tracker's sampled bytes not freed now */
  uint64_t alloc_bytes; /* this tracker's sampled bytes allocated in all (hs_tracker_sampled_bytes) */
  /* peak windows (hs_tracker_new_window): a bucket changed in the current window
   * (epoch >= pk->win_epoch) has its state at the window's start here (zero for a
   * bucket made in it); the others' is their cur. Allocated, for every bucket, while
   * pk->win_epoch != 0. */
  struct hs_totals *win_start;
  size_t win_n; /* entries allocated (and zeroed when allocated) */
  struct hs_buf best; /* hs_peak_row[]: this tracker at the process's peak, when an earlier window held it */
  /* per (stack, thread) totals, when threads: the key (tid << 32 | stack
   * index) -> its index in thread_totals (the table type of stacks; its
   * slots' bucket is not used) */
  struct hs_stacks thread_keys;
  struct hs_totals *thread_totals;
  size_t thread_cap;
  struct hs_series series;   /* this heap's memory over time and kept samples (tracker_series.h) */
  struct hs_lifetimes lt;    /* lifetimes and sizes per stack (tracker_lifetime.h) */
  struct hs_buf stream_rows; /* hs_stream_row[] since the last take */
  struct hs_buf out;         /* the rows of the last row call below */
  struct hs_labels *labels;  /* the label dimension, from the first labelled malloc (tracker_labels.h) */
};

int hs_tracker_init(struct hs_tracker *t, int stream, int dump_at_max);
/* Leaves t's peak group (freed with its last member). */
void hs_tracker_destroy(struct hs_tracker *t);
/* From now on t shares the peak of `with` (and of the trackers sharing it):
 * the heaps of one process whose sum is its memory. Only while t has had no
 * op and shares with no other tracker; -1 then, or when the group is full
 * (HS_PEAK_MEMBERS). 0 when t already shares it. */
int hs_tracker_share_peak(struct hs_tracker *t, struct hs_tracker *with);
/* Keep totals per (stack, thread); only before the first op (-1 after it,
 * or on ENOMEM). */
int hs_tracker_keep_threads(struct hs_tracker *t);

/* One op, arrived at now_ns (the caller's CLOCK_MONOTONIC): applied now if
 * its turn has come, else kept until it has. tid: the allocating thread. */
void hs_tracker_malloc(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t alloc_size,
                       uint64_t sample_size, uint64_t stack_id, uint64_t ts, uint32_t tid, uint64_t now_ns);
void hs_tracker_free(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t now_ns);
/* hs_tracker_malloc with the sample's label set (0: none; tracker_labels.h). */
void hs_tracker_malloc_labelled(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t alloc_size,
                                uint64_t sample_size, uint64_t stack_id, uint64_t ts, uint32_t tid,
                                uint32_t label_set, uint64_t now_ns);
/* hs_tracker_free of a free sent at ts (the records' clock): the allocation's lifetime
 * ends there (tracker_lifetime.h); ts 0: not known. */
void hs_tracker_free_at(struct hs_tracker *t, uint64_t seq, uint64_t addr, uint64_t ts, uint64_t now_ns);
/* Give up on the missing seqs that ops arrived more than HS_GAP_TIMEOUT_NS
 * before now_ns wait for. */
void hs_tracker_expire(struct hs_tracker *t, uint64_t now_ns);
/* Apply every pending op in seq order, skipping the gaps. */
void hs_tracker_flush(struct hs_tracker *t);

/* From now on stack_id books into callsite_id (> 0), with what it booked so
 * far. A stack keeps its first callsite. -1 on ENOMEM. */
int hs_tracker_set_callsite(struct hs_tracker *t, uint64_t stack_id, uint64_t callsite_id);

/* Each fills t->out with rows and returns their count; -1 on ENOMEM. */
int64_t hs_tracker_dump(struct hs_tracker *t);       /* hs_dump_row; marks them dumped */
int64_t hs_tracker_peak(struct hs_tracker *t);       /* hs_peak_row, non-zero callsites */
int64_t hs_tracker_totals(struct hs_tracker *t);     /* hs_totals_row, creation order */
int64_t hs_tracker_live(struct hs_tracker *t);       /* hs_live_row, no order */
int64_t hs_tracker_unresolved(struct hs_tracker *t); /* uint64_t stack ids without callsite */
int64_t hs_tracker_threads(struct hs_tracker *t);    /* hs_thread_row, first-seen order; none
                                                        unless keep_threads */
int64_t hs_tracker_lifetimes(struct hs_tracker *t);  /* hs_lifetime_row (tracker_lifetime.h), cumulative,
                                                        callsites known (tracker_lifetime.c) */

/* Peak windows. From now on the peak (max_unfreed, hs_tracker_peak's state)
 * is that of a new window starting at the current state; each bucket's
 * state now is kept to subtract. The process's peak is not lost: when the
 * closing window's peak is the highest so far its rows are kept, and
 * hs_tracker_peak() and hs_tracker_process_peak() answer with the higher.
 * A window is one for every tracker sharing t's peak: it starts for all of
 * them, with one base and one peak over their sum.
 * Resolve stacks first: a stack without callsite has no row in the kept
 * peak. O(1) but for the first window (which allocates the start states)
 * and a closing window that held the process's peak (its rows are copied).
 * Not for dump_at_max (its dumps follow the window).
 * -1 on ENOMEM (the window is not started). */
int hs_tracker_new_window(struct hs_tracker *t);
int64_t hs_tracker_window(struct hs_tracker *t); /* hs_window_row, changed buckets */
/* The process's peak of sampled unreleased bytes, over all windows and every
 * tracker sharing t's peak (its ts in *ts). */
uint64_t hs_tracker_process_peak(const struct hs_tracker *t, uint64_t *ts);

/* Sampled bytes allocated in all (a running total: O(1)). */
uint64_t hs_tracker_sampled_bytes(const struct hs_tracker *t);

#endif /* HEAPSCOPE_TRACKER_H */
