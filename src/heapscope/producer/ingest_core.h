/*
 * ingest_core.h: the producer's per-record loop, in plain C (no Python).
 *
 *   shared ring (wire.h) --drain--> MALLOC/FREE --seq order--> live table
 *                                                              + stack totals
 *                                \-> STACK/MODULE/HEAP copied whole into
 *                                    `records` for the Python producer
 *
 * The client on the other side of the ring is untrusted: every position and
 * size is copied into a local before it is checked, and any record handed
 * to Python is copied out of shared memory before its fields are validated.
 * A ring whose framing breaks is marked corrupt and never read again; a
 * well-framed record with a bad body is counted and skipped.
 *
 * NB: not thread-safe; _ingest.c makes sure one call at a time runs.
 */
#ifndef HEAPSCOPE_INGEST_CORE_H
#define HEAPSCOPE_INGEST_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "ingest_order.h"
#include "ingest_tables.h"
#include "wire.h"

/* Ops older than this (CLOCK_MONOTONIC) no longer wait for a missing seq. */
#define HS_GAP_TIMEOUT_NS 1000000000ull
/* Publish read_pos at least this often while draining. */
#define HS_PUBLISH_BYTES 65536u

struct hs_buf {
  uint8_t *p;
  size_t len;
  size_t cap;
};

struct hs_ingest_stats {
  uint64_t records;          /* every record consumed, PAD and malformed included */
  uint64_t mallocs;
  uint64_t frees;
  uint64_t pads;
  uint64_t malformed_records;
  uint64_t late_records;     /* ops whose seq was already committed */
  uint64_t gaps_skipped;     /* sequence numbers given up on */
  uint64_t implicit_frees;   /* a malloc at an address still live */
  uint64_t untracked_frees;  /* a free of an address not live */
  uint64_t max_pending;
};

/* One row of the stream (7 x u64), as Ingest.take_stream() returns it. */
struct hs_stream_row {
  uint64_t kind;
  uint64_t seq;
  uint64_t addr;
  uint64_t alloc_size;
  uint64_t sample_size;
  uint64_t stack_id;
  uint64_t ts;
};

/* dump_at_max: per stack, the sampled bytes not freed now and at the peak
 * (heapprofd's retain_max{cur, max, cur_count, max_count}). Parallel to
 * stacks.totals, by the same index. */
struct hs_peak_row {
  uint64_t cur_bytes;
  uint64_t cur_count;
  uint64_t max_bytes;
  uint64_t max_count;
};

struct hs_ingest {
  uint8_t *data;                /* ring data area (after the meta page) */
  struct hs_ring_meta *meta;
  uint64_t ring_size;
  uint64_t read_pos;            /* ours; the shared copy is only published */
  uint64_t zeroed_to;           /* bytes below this are zeroed */
  int corrupt;
  int oom;                      /* an allocation failed; an op was dropped */
  int stream;
  uint64_t committed_seq;
  uint64_t last_ts;
  struct hs_ingest_stats st;
  struct hs_live_table live;
  struct hs_stacks stacks;
  struct hs_pending pending;
  struct hs_buf stream_rows;    /* hs_stream_row[] since the last take */
  struct hs_buf records;        /* whole STACK/MODULE/HEAP records of the last drain */
  size_t records_count;
  /* dump_at_max (docs/profile.md): the process peak of sampled unfreed bytes.
   * At a new peak every row's max is set to its cur; when nothing but
   * mallocs happened since the previous peak (peak_clean), only the row of
   * the new malloc can differ, so only it is copied. */
  int dump_at_max;
  int peak_clean;
  uint64_t cur_unfreed;
  uint64_t max_unfreed;
  uint64_t max_ts;             /* ts of the malloc that made the peak */
  struct hs_peak_row *peak;    /* peak_cap rows, zeroed beyond stacks.count */
  size_t peak_cap;
};

/* map: HS_META_SIZE + ring_size bytes of the shared memory. -1 on ENOMEM. */
int hs_ingest_init(struct hs_ingest *g, void *map, uint64_t ring_size, int stream,
                   int dump_at_max);
void hs_ingest_destroy(struct hs_ingest *g);
/* Read up to max_records (0 = all) committed records. The STACK, MODULE and
 * HEAP records read are left in g->records (g->records_count of them). */
void hs_ingest_drain(struct hs_ingest *g, uint64_t max_records);
/* Apply every pending op in seq order, skipping the gaps. */
void hs_ingest_flush(struct hs_ingest *g);

#endif /* HEAPSCOPE_INGEST_CORE_H */
