/*
 * ingest_core.h: the producer's ring reader, in plain C (no Python).
 *
 *   shared ring (wire.h) --drain--> MALLOC/FREE --> the process's heap tracker
 *                                                   (bookkeeping/tracker.h)
 *                                \-> STACK: kept by the process's resolver
 *                                    (bookkeeping/resolver.h)
 *                                \-> MODULE/HEAP/... copied whole into
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

#include "resolver.h"
#include "tracker.h"
#include "wire.h"

/* The largest sample or allocation size a MALLOC or HEAP_MALLOC may carry:
 * 2^48 bytes (256 TiB) is more than a 48-bit address space holds. A record
 * claiming more is counted malformed: sizes near 2^64 would wrap the
 * tracker's sums (its peak above all), while with this bound wrapping them
 * takes 2^16 live samples of 256 TiB each. */
#define HS_MAX_SAMPLE_SIZE (1ull << 48)

/* Publish read_pos at least this often while draining. */
#define HS_PUBLISH_BYTES 65536u

struct hs_ingest_stats {
  uint64_t records;          /* every record consumed, PAD and malformed included */
  uint64_t mallocs;
  uint64_t frees;
  uint64_t pads;
  uint64_t malformed_records;
  uint64_t held_stacks;      /* STACK records kept (hs_resolver_keep) */
};

/* A custom heap whose HEAP_MALLOC / HEAP_FREE records go straight to a
 * tracker of its own here, not to Python (a heap as busy as malloc's,
 * like Python's own). Its HEAP record still goes to Python, which sets the
 * route up (hs_ingest_route) once it has made the heap's tracker: the
 * records read before that went to Python, and the tracker orders both by
 * the heap's sequence numbers. */
#define HS_INGEST_MAX_ROUTES 4
struct hs_ingest_route {
  uint32_t heap_id;
  struct hs_tracker *tracker; /* not owned; NULL: off (records go to Python) */
  uint64_t mallocs, frees;    /* records applied here */
};

/* The TSC clock (wire.h HS_CFG_TSC): a client stamps its records with rdtsc, and the
 * records' ts become CLOCK_MONOTONIC ns here, before the tracker sees them:
 * ns = ns0 + (tsc - tsc0) * ns_per_tick, (tsc0, ns0) the producer's reading of both clocks
 * before it answered any client, ns_per_tick measured from there to its latest drain
 * (the span grows, the rate's error shrinks: ~20 ns of reading error over it). */
struct hs_tsc_cal {
  uint64_t tsc0, ns0;
  double ns_per_tick; /* 0: not measured yet */
};

/* ts (a TSC reading) as CLOCK_MONOTONIC ns; 0 stays 0 (not known). */
static inline uint64_t hs_tsc_ns(const struct hs_tsc_cal *c, uint64_t ts) {
  if (ts == 0) return 0;
  return c->ns0 + (uint64_t)(int64_t)((double)(int64_t)(ts - c->tsc0) * c->ns_per_tick);
}

struct hs_ingest {
  uint8_t *data;                /* ring data area (after the meta page) */
  struct hs_ring_meta *meta;
  uint64_t ring_size;
  uint64_t read_pos;            /* ours; the shared copy is only published */
  uint64_t zeroed_to;           /* bytes below this are zeroed */
  int corrupt;
  int oom;                      /* a record buffer could not grow */
  struct hs_ingest_stats st;
  struct hs_tracker *tracker;   /* not owned */
  struct hs_resolver *resolver;   /* not owned: where STACK records go */
  struct hs_buf records;        /* whole MODULE/HEAP/... records of the last drain */
  size_t records_count;
  struct hs_ingest_route routes[HS_INGEST_MAX_ROUTES];
  uint32_t nroutes;
  int tsc;                      /* the client stamps with the TSC: ts converted with `cal` */
  struct hs_tsc_cal cal;        /* the caller's copy of the calibration, set before a drain */
};

/* map: HS_META_SIZE + ring_size bytes of the shared memory; the ops read go
 * to tracker, the STACK records to resolver. */
void hs_ingest_init(struct hs_ingest *g, void *map, uint64_t ring_size, struct hs_tracker *tracker,
                    struct hs_resolver *resolver);
void hs_ingest_destroy(struct hs_ingest *g);
/* Read up to max_records (0 = all) committed records at time now_ns (the
 * caller's CLOCK_MONOTONIC, for the tracker's gap timeout). The rare
 * records read but STACK (MODULE, HEAP, ...) are left in g->records
 * (g->records_count of them). */
void hs_ingest_drain(struct hs_ingest *g, uint64_t max_records, uint64_t now_ns);
/* The route of heap_id, made on first use; NULL when all are taken. */
struct hs_ingest_route *hs_ingest_route(struct hs_ingest *g, uint32_t heap_id);
#endif /* HEAPSCOPE_INGEST_CORE_H */
