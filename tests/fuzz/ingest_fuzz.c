/*
 * ingest_fuzz.c: libFuzzer harness for the producer's C ingest loop.
 *
 * The client on the other side of the ring is untrusted (docs/wire.md), so
 * the ingest must survive any bytes in the shared memory: this harness maps
 * a fake ring (meta page + data area, as wire.h lays it out), lets the fuzz
 * input play the client, and drains it through hs_ingest_drain() into a
 * heap tracker and a resolver (bookkeeping/tracker.h, resolver.h) the way
 * producer/_ingest.c does.
 *
 * Input layout (every field optional: a short input just ends early):
 *
 *   byte 0      bits 0-3  ring size = 64 << (bits & 7) bytes (64 .. 8 KiB)
 *               bit 4     stream rows on        bit 5  dump_at_max on
 *               bit 6     raw positions: each batch sets write_pos itself
 *               bit 7     per-thread totals on (hs_tracker_keep_threads)
 *   bytes 1-8   u64 starting read_pos (rounded down to 8 unless raw)
 *   then batches, each:  u16 length, u8 max_records, [u64 write_pos if raw],
 *               length bytes copied into the ring at write_pos (wrapping),
 *               after which write_pos advances by length rounded up to 8
 *               and the ingest drains up to max_records records (0 = all),
 *               at a clock that advances 0.6 s a batch (gaps time out).
 *
 * Besides the sanitizers, the harness checks the ingest's own promises
 * after every drain and aborts when one breaks: every record handed over
 * for Python is a MODULE, HEAP, HEAP_MALLOC, HEAP_FREE, PYCODE, PYINFO or
 * LABELSET record with a sane body (a STACK never: the resolver keeps it), read_pos
 * is published, and a ring marked corrupt is never read again. The live
 * table, the per-callsite totals and the peak rows must balance after every
 * batch (the per-thread totals too, when kept), and the dump rows at the
 * end. After every other batch the stacks kept are resolved (a namer of
 * few frames, so that paths share nodes), and at the end every stack gets
 * a callsite.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest_core.h"
#include "resolver.h"
#include "tracker.h"
#include "trie.h"
#include "wire.h"

struct reader {
  const uint8_t *p;
  size_t n;
};

static int take(struct reader *r, void *out, size_t len) {
  if (r->n < len) return 0;
  memcpy(out, r->p, len);
  r->p += len;
  r->n -= len;
  return 1;
}

static void fail(const char *what) {
  fprintf(stderr, "ingest_fuzz: invariant broken: %s\n", what);
  abort();
}

/* The callsite the harness gives a stack never received: a few, so that stacks fold together. */
static uint64_t callsite_of(uint64_t stack_id) { return (stack_id & 3) + 1; }

/* Names a frame: one of a few ids, some FILTERED, some not to keep (resolver.h). */
static int64_t fuzz_namer(void *ctx, int kind, uint64_t a, int64_t b) {
  (void)ctx;
  uint64_t id = 1 + ((a ^ (uint64_t)b ^ (uint64_t)kind) % 61);
  return (int64_t)(id | (id % 7 == 0 ? HS_FID_FILTERED : 0) | (kind == HS_NAME_PYFRAME && id % 5 == 0 ? HS_FID_NOCACHE : 0));
}

/* Every kept stack is well formed; resolving them gives each a callsite of the trie. */
static void resolve_kept(struct hs_resolver *res, struct hs_trie *trie, struct hs_tracker *t, int wait) {
  const struct hs_u64s *lists[3] = {&res->parked, &res->native, &res->python};
  for (int l = 0; l < 3; l++)
    for (size_t n = 0; n < lists[l]->len; n++) {
      uint32_t size;
      const uint8_t *rec = hs_resolver_held(res, lists[l]->p[n], &size);
      if (!rec) fail("a waiting stack is not kept");
      if (HS_RECORD_TYPE(*(const uint64_t *)rec) != HS_REC_STACK || !hs_resolver_record_ok(rec + 8, size - 8u))
        fail("a kept stack is not a well-formed STACK");
    }
  struct hs_splice sp = {0x1000, 0x2000, 0, 0x800, wait, 1};
  uint64_t unplaced = 0;
  int64_t n = hs_resolver_resolve(res, trie, t, &sp, fuzz_namer, NULL, &unplaced);
  if (n == -1) fail("the namer never fails");
  if (n < 0) t->oom = 1;
  else if (!wait && res->native.len + res->python.len + res->parked.len) fail("a stack waits after a final resolve");
}

/* Every record handed over is a rare kind with a body the ingest checked. */
static void check_records(const struct hs_ingest *g) {
  size_t off = 0;
  for (size_t i = 0; i < g->records_count; i++) {
    if (g->records.len - off < 8) fail("records buffer shorter than its count");
    uint64_t hdr;
    memcpy(&hdr, g->records.p + off, 8);
    uint32_t size = HS_RECORD_SIZE(hdr), type = HS_RECORD_TYPE(hdr);
    if (size < 8 || (size & 7) || size > g->records.len - off) fail("record size handed over");
    const uint8_t *body = g->records.p + off + 8;
    switch (type) {
      case HS_REC_MODULE: {
        struct hs_module m;
        if (size - 8 < sizeof m) fail("short MODULE handed over");
        memcpy(&m, body, sizeof m);
        if (m.build_id_len > HS_BUILD_ID_MAX || sizeof m + (uint64_t)m.path_len > size - 8) fail("MODULE lengths");
        break;
      }
      case HS_REC_HEAP:
        if (size - 8 < sizeof(struct hs_heap)) fail("short HEAP handed over");
        break;
      case HS_REC_HEAP_MALLOC: {
        struct hs_heap_malloc m;
        if (size - 8 != sizeof m) fail("HEAP_MALLOC size handed over");
        memcpy(&m, body, sizeof m);
        if (m.sample_size > HS_MAX_SAMPLE_SIZE || m.alloc_size > HS_MAX_SAMPLE_SIZE) fail("HEAP_MALLOC sizes");
        break;
      }
      case HS_REC_HEAP_FREE:
        if (size - 8 != sizeof(struct hs_heap_free)) fail("HEAP_FREE size handed over");
        break;
      case HS_REC_PYCODE: {
        struct hs_pycode c;
        if (size - 8 < sizeof c) fail("short PYCODE handed over");
        memcpy(&c, body, sizeof c);
        if (sizeof c + (uint64_t)c.name_len + c.file_len + c.table_len > size - 8) fail("PYCODE lengths");
        break;
      }
      case HS_REC_PYINFO: {
        struct hs_pyinfo i;
        if (size - 8 < sizeof i) fail("short PYINFO handed over");
        memcpy(&i, body, sizeof i);
        if (sizeof i + (uint64_t)i.status_len > size - 8) fail("PYINFO length");
        break;
      }
      case HS_REC_LABELSET: {
        struct hs_labelset l;
        if (size - 8 < sizeof l) fail("short LABELSET handed over");
        memcpy(&l, body, sizeof l);
        if (l.text_len > HS_LABEL_TEXT_MAX || sizeof l + (uint64_t)l.text_len > size - 8) fail("LABELSET length");
        break;
      }
      default:
        fail("record type handed over");
    }
    off += size;
  }
  if (off != g->records.len) fail("records buffer longer than its records");
}

/* HEAPSCOPE_FUZZ_SELFTEST=1: an input starting with "CRASH" aborts, so that
 * tests/fuzz/test_fuzz.py can show that a crash is caught and reported. */
static int selftest;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  selftest = getenv("HEAPSCOPE_FUZZ_SELFTEST") != NULL;
  return 0;
}

/* A bucket's totals at the peak (tracker.h: unchanged since the peak, cur holds them). */
static struct hs_totals peak_of(const struct hs_tracker *t, size_t i) {
  return t->buckets[i].epoch != t->pk->peak_epoch ? t->buckets[i].cur : t->rest[i].at_peak;
}

/* The books balance: the live table, the per-callsite totals and the peak
 * rows describe the same bytes. Sums are mod 2^64, as in the tracker, but
 * sample sizes are range-checked on the wire so nothing here wraps. */
static void check_books(struct hs_tracker *t, uint64_t mallocs) {
  uint64_t live_bytes = 0, live_count = 0;
  for (size_t i = 0; i <= t->live.mask; i++) {
    const struct hs_live *e = &t->live.slots[i];
    if (!e->bucket_plus1) continue;
    if (e->stack_idx >= (t->threads ? t->thread_keys.count : t->stacks.count)) fail("live entry of an unknown stack");
    if (t->threads && e->stack_idx >= t->thread_cap) fail("live entry of a thread key without totals");
    if (e->bucket_plus1 - 1 >= t->nbuckets) fail("live entry of an unknown bucket");
    if (e->sample_size > HS_MAX_SAMPLE_SIZE) fail("live sample size out of range");
    live_bytes += e->sample_size;
    live_count++;
  }
  if (live_count != t->live.count) fail("live count differs from the used slots");
  if (t->live.count > mallocs) fail("more live entries than mallocs");
  uint64_t net = 0, at_max = 0;
  for (size_t i = 0; i < t->nbuckets; i++) {
    const struct hs_bucket *b = &t->buckets[i];
    if (b->into_plus1 && (b->cur.alloc_count || b->cur.alloc_bytes)) fail("a folded bucket kept totals");
    if (b->cur.free_bytes > b->cur.alloc_bytes || b->cur.free_count > b->cur.alloc_count) fail("bucket freed more than it allocated");
    net += b->cur.alloc_bytes - b->cur.free_bytes;
    struct hs_totals p = peak_of(t, i);
    at_max += p.alloc_bytes - p.free_bytes;
  }
  if (net != live_bytes) fail("callsite totals differ from the live allocations");
  if (net != t->cur_unfreed) fail("cur_unfreed differs from the live allocations");
  if (t->cur_unfreed > t->pk->max_unfreed) fail("unfreed bytes above the peak");
  if (at_max != t->pk->max_unfreed) fail("buckets at the peak do not sum to the peak");
  if (t->threads) {
    /* Per (stack, thread): the same mallocs and frees as the buckets, split by thread. */
    uint64_t thread_net = 0, thread_allocs = 0, bucket_allocs = 0;
    for (size_t i = 0; i < t->thread_keys.count && i < t->thread_cap; i++) {
      const struct hs_totals *x = &t->thread_totals[i];
      if (x->free_count > x->alloc_count || x->free_bytes > x->alloc_bytes) fail("a thread freed more than it allocated");
      if ((uint32_t)t->thread_keys.ids[i] >= t->stacks.count) fail("thread totals of an unknown stack");
      thread_net += x->alloc_bytes - x->free_bytes;
      thread_allocs += x->alloc_count;
    }
    for (size_t i = 0; i < t->nbuckets; i++) bucket_allocs += t->buckets[i].cur.alloc_count;
    if (thread_net != t->cur_unfreed) fail("thread totals differ from the live allocations");
    if (thread_allocs != bucket_allocs) fail("thread totals count other mallocs than the buckets");
  }
  /* hs_tracker_peak() rows cover the buckets with a callsite: with every stack resolved, all of them. */
  int64_t n = hs_tracker_peak(t);
  if (n < 0) {
    t->oom = 1;
    return;
  }
  uint64_t rows = 0, unresolved_at_max = 0;
  const struct hs_peak_row *row = (const struct hs_peak_row *)t->out.p;
  for (int64_t i = 0; i < n; i++) {
    if (row[i].size > row[i].alloc_size || row[i].count > row[i].alloc_count) fail("peak row inconsistent");
    rows += row[i].size;
  }
  for (size_t i = 0; i < t->nbuckets; i++) {
    if (t->rest[i].callsite_id != 0) continue;
    struct hs_totals p = peak_of(t, i);
    unresolved_at_max += p.alloc_bytes - p.free_bytes;
  }
  if (rows + unresolved_at_max != t->pk->max_unfreed) fail("peak rows do not sum to the peak");
}

/* Sum of the dump rows' sizes so far (what bookkeeping/dump.py accumulates). */
static uint64_t dump_sizes(struct hs_tracker *t, uint64_t sum) {
  int64_t n = hs_tracker_dump(t);
  if (n < 0) {
    t->oom = 1;
    return sum;
  }
  const struct hs_dump_row *row = (const struct hs_dump_row *)t->out.p;
  for (int64_t i = 0; i < n; i++) sum += (uint64_t)row[i].size;
  return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (selftest && size >= 5 && memcmp(data, "CRASH", 5) == 0) fail("self-test input");
  struct reader r = {data, size};
  uint8_t mode = 0;
  uint64_t start = 0;
  take(&r, &mode, 1);
  take(&r, &start, 8);
  const uint64_t ring_size = 64ull << (mode & 7);
  const int stream = (mode >> 4) & 1, dump_at_max = (mode >> 5) & 1, raw = (mode >> 6) & 1, threads = mode >> 7;
  if (!raw) start &= ~7ull;

  uint8_t *map = calloc(1, HS_META_SIZE + ring_size);
  if (!map) return 0;
  struct hs_ring_meta *meta = (struct hs_ring_meta *)map;
  uint8_t *ring = map + HS_META_SIZE;
  meta->magic = HS_WIRE_MAGIC;
  meta->version = HS_WIRE_VERSION;
  meta->ring_size = ring_size;
  meta->read_pos = start;
  meta->write_pos = start;

  struct hs_tracker t;
  if (hs_tracker_init(&t, stream, dump_at_max) < 0) {
    free(map);
    return 0;
  }
  if (threads && hs_tracker_keep_threads(&t) < 0) {
    hs_tracker_destroy(&t);
    free(map);
    return 0;
  }
  struct hs_resolver res = {0};
  struct hs_trie trie = {0};
  struct hs_ingest g;
  hs_ingest_init(&g, map, ring_size, &t, &res);
  uint64_t wp = start, dumped = 0;
  for (int batch = 0; batch < 64; batch++) {
    uint16_t len;
    uint8_t max_records;
    if (!take(&r, &len, 2) || !take(&r, &max_records, 1)) break;
    if (raw && !take(&r, &wp, 8)) break;
    if (len > r.n) len = (uint16_t)r.n;
    for (size_t i = 0; i < len; i++) ring[(wp + i) & (ring_size - 1)] = r.p[i];
    r.p += len;
    r.n -= len;
    if (!raw) wp += HS_ALIGN8((uint64_t)len);
    __atomic_store_n(&meta->write_pos, wp, __ATOMIC_RELEASE);

    const int was_corrupt = g.corrupt;
    const uint64_t rp_before = g.read_pos;
    /* A clock 0.6 s a batch: gaps time out after two batches. */
    hs_ingest_drain(&g, max_records, (uint64_t)batch * 600000000ull);
    check_records(&g);
    if (batch & 1) resolve_kept(&res, &trie, &t, 1);
    if (meta->read_pos != g.read_pos) fail("read_pos not published");
    if (was_corrupt && g.read_pos != rp_before) fail("a corrupt ring was read again");
    if (!g.corrupt && g.read_pos - rp_before > ring_size) fail("read past one ring's worth");
    if (g.st.records < g.st.mallocs + g.st.frees + g.st.pads + g.st.malformed_records) fail("record counts");
    if (stream) t.stream_rows.len = 0; /* what Ingest.take_stream() does */
    if (!g.oom && !t.oom) check_books(&t, g.st.mallocs);
    if (batch & 1) dumped = dump_sizes(&t, dumped);
  }
  hs_tracker_flush(&t);
  if (t.pending.n != 0) fail("flush left pending ops");
  if (!g.oom && !t.oom) resolve_kept(&res, &trie, &t, 0);
  /* Every stack gets its callsite, then the dump rows sum to what is reported. */
  int64_t n = hs_tracker_unresolved(&t);
  if (n > 0) {
    size_t count = (size_t)n;
    uint64_t *ids = malloc(count * sizeof *ids);
    if (ids) {
      memcpy(ids, t.out.p, count * sizeof *ids);
      for (size_t i = 0; i < count; i++)
        if (hs_tracker_set_callsite(&t, ids[i], callsite_of(ids[i])) < 0) t.oom = 1;
      free(ids);
    } else {
      t.oom = 1;
    }
  }
  if (!g.oom && !t.oom) {
    check_books(&t, g.st.mallocs);
    if (hs_tracker_unresolved(&t) != 0) fail("a stack is still unresolved");
    dumped = dump_sizes(&t, dumped);
    if (!t.oom && dumped != (dump_at_max ? t.pk->max_unfreed : t.cur_unfreed)) fail("dump rows do not sum up");
  }
  hs_ingest_destroy(&g);
  hs_resolver_destroy(&res);
  hs_trie_destroy(&trie);
  hs_tracker_destroy(&t);
  free(map);
  return 0;
}
