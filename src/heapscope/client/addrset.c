/* addrset.c: writers of the sampled-address set (see addrset.h). */
#include "addrset.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#include "own.h"
#include "ring.h"
#include "wire.h"

struct hs_addr_shard hs_addr_shards[HS_ADDRSET_SHARDS];
/* Zero-filled static storage: its pages cost nothing until written (a read
 * maps the shared zero page). */
uint64_t hs_addr_filter[HS_ADDR_WORDS] __attribute__((aligned(4096)));

/* The pinned range (hs_addrset_pin), in buckets: [pin_first, pin_first +
 * pin_count) modulo the filter. Written before the pointers it covers exist;
 * read by removes, under shard locks. */
static uint64_t pin_first, pin_count;

static int pinned(uint64_t b) {
  uint64_t first = __atomic_load_n(&pin_first, __ATOMIC_RELAXED);
  return ((b - first) & (HS_ADDR_BUCKETS - 1)) < __atomic_load_n(&pin_count, __ATOMIC_RELAXED);
}

/* Only the owner shard writes a filter word (addrset.h), so plain relaxed
 * stores do; readers need no more than relaxed (see hs_addr_maybe_sampled). */
static void bit_set(uint64_t b) {
  uint64_t *w = &hs_addr_filter[b / 64];
  uint64_t v = *w, bit = UINT64_C(1) << (b % 64);
  if (!(v & bit))
    __atomic_store_n(w, v | bit, __ATOMIC_RELAXED);
}

static void bit_clear(uint64_t b) {
  uint64_t *w = &hs_addr_filter[b / 64];
  __atomic_store_n(w, *w & ~(UINT64_C(1) << (b % 64)), __ATOMIC_RELAXED);
}

#define INITIAL_CAPACITY 256 /* 2 KiB of slots */
#define INITIAL_WORDS (1 + INITIAL_CAPACITY) /* the header (mask), then the slots */

/* Each shard's first table, side by side in zero-filled static storage: a
 * mmap call per shard was 256 system calls and 256 page faults in the
 * first samples of a program (cc1plus, git log -p), where these
 * cost only the faults of the ~129 pages written, and no call. Grown tables
 * are mmapped as before. Accessed through struct hs_addr_table, whose
 * members are uint64_t too. Whole pages, page-aligned: a fork reset drops
 * them (hs_addrset_reset) without touching a neighbour. */
#define FIRST_TABLES_WORDS ((HS_ADDRSET_SHARDS * INITIAL_WORDS + 511) & ~511) /* whole pages */
static uint64_t first_tables[FIRST_TABLES_WORDS] __attribute__((aligned(4096)));

static struct hs_addr_table *first_table(const struct hs_addr_shard *s) {
  uint64_t *w = &first_tables[(size_t)(s - hs_addr_shards) * INITIAL_WORDS];
  w[0] = INITIAL_CAPACITY - 1; /* slots all zero: empty (a fresh or reset shard) */
  return (struct hs_addr_table *)(void *)w;
}

/* The shard lock is only ever held for a handful of stores (or one mmap when
 * growing), never across an unwind, a ring write or a loader call. */
static __attribute__((noinline)) void shard_lock_many(struct hs_addr_shard *s) {
  unsigned spins = 0;
  while (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE)) {
    while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED)) {
      if (++spins < 1000)
        __builtin_ia32_pause();
      else
        sched_yield(); /* the holder was preempted: let it run (never fails: errno,
                        * which the free path does not keep, is untouched) */
    }
  }
}

/* single: hs_single_threaded(), read by the caller once for its lock and
 * unlock. One thread (ring.h): nobody else can hold or take the lock until
 * we are out, so neither is needed. Inlined, the spin out of line: a call
 * that only returned was a dozen instructions of every insert and remove. */
static inline __attribute__((always_inline)) void shard_lock(struct hs_addr_shard *s, int single) {
  if (!single)
    shard_lock_many(s);
}

static inline __attribute__((always_inline)) void shard_unlock(struct hs_addr_shard *s,
                                                               int single) {
  if (!single)
    __atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE);
}

static struct hs_addr_table *table_new(uint64_t capacity) {
  size_t bytes = sizeof(struct hs_addr_table) + capacity * sizeof(uint64_t);
  void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  hs_own_map(m, bytes, HS_OWN_PRIVATE);
  struct hs_addr_table *t = m; /* zero-filled: all slots empty */
  t->mask = capacity - 1;
  return t;
}

/* The home slot of key a: a hash of its bucket (addrset.h). */
static uint64_t home(uint64_t a) {
  return hs_addr_hash(hs_addr_bucket(a));
}

static void table_put(struct hs_addr_table *t, uint64_t a) {
  uint64_t mask = t->mask;
  uint64_t i = home(a) & mask;
  for (;;) {
    uint64_t v = t->slots[i];
    if (v == a)
      return;
    if (v == HS_ADDRSET_EMPTY) {
      __atomic_store_n(&t->slots[i], a, __ATOMIC_RELAXED);
      return;
    }
    i = (i + 1) & mask;
  }
}

/* Grows s (under its lock) from t, of cap slots (0: none yet): fills a new
 * table completely, then publishes it. Readers on the old one still find
 * everything that was in it. Returns the new table, or NULL. Out of line:
 * inlined, its registers cost every insert a few saves. */
static __attribute__((noinline)) struct hs_addr_table *grow(struct hs_addr_shard *s,
                                                           struct hs_addr_table *t, uint64_t cap) {
  struct hs_addr_table *n = cap ? table_new(cap * 2) : first_table(s);
  if (n == NULL)
    return NULL;
  for (uint64_t i = 0; i < cap; i++)
    if (t->slots[i] != HS_ADDRSET_EMPTY)
      table_put(n, t->slots[i]);
  s->mask = n->mask;
  __atomic_store_n(&s->table, n, __ATOMIC_RELEASE);
  return n;
}

/* The insert, inlined for one thread (no lock) and for many. */
static inline __attribute__((always_inline)) int insert_in(struct hs_addr_shard *s, uint64_t a,
                                                           uint64_t b, int single) {
  shard_lock(s, single);
  struct hs_addr_table *t = s->table;
  uint64_t cap = t ? s->mask + 1 : 0;
  if (HS_UNLIKELY((s->count + 1) * 2 > cap)) {
    t = grow(s, t, cap);
    if (t == NULL) {
      shard_unlock(s, single);
      return -HS_ERR_OUT_OF_MEMORY;
    }
  }
  /* A second insert of the same address (its free was missed) keeps one. */
  uint64_t mask = s->mask;
  uint64_t i = hs_addr_hash(b) & mask;
  for (;;) {
    uint64_t v = t->slots[i];
    if (v == a)
      break;
    if (v == HS_ADDRSET_EMPTY) {
      /* The slot first, then the bit: a free that sees the bit finds the key
       * (the program orders that free after our return anyway). */
      __atomic_store_n(&t->slots[i], a, __ATOMIC_RELEASE);
      s->count++;
      bit_set(b);
      break;
    }
    i = (i + 1) & mask;
  }
  shard_unlock(s, single);
  return HS_OK;
}

static __attribute__((noinline)) int insert_many(struct hs_addr_shard *s, uint64_t a, uint64_t b) {
  return insert_in(s, a, b, 0);
}

int hs_addrset_insert(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint64_t b = hs_addr_bucket(a);
  struct hs_addr_shard *s = &hs_addr_shards[HS_ADDR_SHARD(b)];
  if (HS_LIKELY(hs_single_threaded()))
    return insert_in(s, a, b, 1);
  return insert_many(s, a, b);
}

/* The remove, for one thread (single: no other thread exists, ring.h) or
 * many. Inlined twice with a constant `single`: the one-thread copy takes
 * no lock, probes nothing first and leaves seq alone (nobody can read the
 * table while we move entries: no other thread, and a signal handler sees
 * the guard), and keeps few enough values to need few registers saved. */
static inline __attribute__((always_inline)) int remove_in(struct hs_addr_shard *s, uint64_t a,
                                                           uint64_t b, uint64_t h, int single) {
  /* The lock-free probe first keeps a free that only aliases a sampled
   * granule off the lock. */
  if (!single && !hs_addrset_probe(s, a, h))
    return 0;
  shard_lock(s, single);
  struct hs_addr_table *t = s->table;
  if (t == NULL) {
    shard_unlock(s, single);
    return 0;
  }
  /* Another key of the bucket (addrset.h) lies in the run from the bucket's
   * home to the next empty slot: the search reads the run up to the key,
   * the shift below the rest, so `kept` needs no pass of its own. */
  int kept = 0;
  uint64_t mask = s->mask;
  uint64_t i = h & mask;
  for (;;) {
    uint64_t v = t->slots[i];
    if (v == HS_ADDRSET_EMPTY) {
      shard_unlock(s, single); /* not there: a double free, or a racing remove */
      return 0;
    }
    if (v == a)
      break;
    kept |= hs_addr_bucket(v) == b;
    i = (i + 1) & mask;
  }
  /* Backward-shift deletion keeps every probe chain unbroken without
   * tombstones. Entries move, so readers must not trust a probe that
   * overlaps it: seq is odd for the duration. */
  uint32_t seq = 0;
  if (!single) {
    seq = s->seq;
    __atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
  }
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    uint64_t v = t->slots[j];
    if (v == HS_ADDRSET_EMPTY)
      break;
    uint64_t vb = hs_addr_bucket(v);
    kept |= vb == b;
    uint64_t vh = hs_addr_hash(vb) & mask;
    /* v may move to the hole at i unless its home lies cyclically in (i, j]. */
    int home_in_range = (i <= j) ? (i < vh && vh <= j) : (i < vh || vh <= j);
    if (!home_in_range) {
      __atomic_store_n(&t->slots[i], v, __ATOMIC_RELAXED);
      i = j;
    }
  }
  __atomic_store_n(&t->slots[i], HS_ADDRSET_EMPTY, __ATOMIC_RELAXED);
  s->count--;
  if (!kept && !pinned(b))
    bit_clear(b);
  if (!single)
    __atomic_store_n(&s->seq, seq + 2, __ATOMIC_RELEASE);
  shard_unlock(s, single);
  return 1;
}

static __attribute__((noinline)) int remove_many(struct hs_addr_shard *s, uint64_t a, uint64_t b,
                                                 uint64_t h) {
  return remove_in(s, a, b, h, 0);
}

int hs_addrset_remove(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint64_t b = hs_addr_bucket(a);
  uint64_t h = hs_addr_hash(b);
  struct hs_addr_shard *s = &hs_addr_shards[HS_ADDR_SHARD(b)];
  if (HS_LIKELY(hs_single_threaded()))
    return remove_in(s, a, b, h, 1);
  return remove_many(s, a, b, h);
}

/* Sets the pinned buckets' bits, each word under its shard's lock. */
static void pin_bits(void) {
  for (uint64_t n = 0; n < pin_count; n++) {
    uint64_t b = (pin_first + n) & (HS_ADDR_BUCKETS - 1);
    struct hs_addr_shard *s = &hs_addr_shards[HS_ADDR_SHARD(b)];
    int single = hs_single_threaded();
    shard_lock(s, single);
    bit_set(b);
    shard_unlock(s, single);
  }
}

void hs_addrset_pin(const void *p, size_t bytes) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint64_t first = a >> HS_ADDR_GRANULE_SHIFT;
  uint64_t last = (a + bytes - 1) >> HS_ADDR_GRANULE_SHIFT;
  if (bytes == 0)
    return;
  uint64_t count = last - first + 1;
  /* The range first, then its bits: a remove of an aliasing key in between
   * keeps a bit that is about to be set, where the other order could let it
   * clear one that was just set. */
  __atomic_store_n(&pin_count, count < HS_ADDR_BUCKETS ? count : HS_ADDR_BUCKETS, __ATOMIC_RELAXED);
  __atomic_store_n(&pin_first, first & (HS_ADDR_BUCKETS - 1), __ATOMIC_RELAXED);
  pin_bits();
}

void hs_addrset_reset(void) {
  memset(hs_addr_shards, 0, sizeof hs_addr_shards);
  /* Dropping the pages of the filter (private zero-filled memory) makes them
   * read as zero again and gives the child the memory back; only if that
   * fails are they written. */
  if (madvise(hs_addr_filter, sizeof hs_addr_filter, MADV_DONTNEED) != 0)
    memset(hs_addr_filter, 0, sizeof hs_addr_filter);
  /* The shards' first tables are taken again from here: emptied the same way. */
  if (madvise(first_tables, sizeof first_tables, MADV_DONTNEED) != 0)
    memset(first_tables, 0, sizeof first_tables);
  pin_bits();
}
