/* Unit test driver for client/ring.c (the writer side of the shared ring),
 * built and run by test_ring.py. A reader in this file plays the producer:
 * it follows read_pos, checks each record, zeroes what it consumed. Checks:
 * records come back in order with their bytes, a record never crosses the
 * end of the data area (a PAD fills the rest), sequence numbers have no gap
 * (also around dropped records and with two writer threads: there a thread
 * takes its number after reserving its space, so ring order and number order
 * may differ, as wire.md says; every number must still come exactly once), a full ring
 * drops and counts without blocking mode, nonsense positions (read_pos >
 * write_pos) count as full, and oversized records and a shutting-down ring
 * are refused. Prints one line per failed check and exits non-zero on any
 * failure. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ring.h"

#define DATA_SIZE 4096u

static struct hs_ring_meta meta __attribute__((aligned(64)));
static unsigned char data[DATA_SIZE] __attribute__((aligned(64)));
static uint64_t seq_counter;

static struct hs_ring ring_new(void) {
  memset(&meta, 0, sizeof meta);
  memset(data, 0, sizeof data);
  seq_counter = 1;
  struct hs_ring r = {&meta, data, DATA_SIZE, 0, -1, 0, 0, 0, 1000000, &seq_counter};
  return r;
}

/* The body a writer sends for record number n: a fixed part of 24 bytes
 * (8 for the sequence, then n twice) and a tail of n % 300 bytes. */
struct body {
  uint64_t seq, n, n2;
};

static void tail_of(uint64_t n, unsigned char *tail, size_t len) {
  for (size_t i = 0; i < len; i++)
    tail[i] = (unsigned char)(n * 31 + i);
}

#define MAX_SEQ 262144u

struct reader {
  uint64_t records, pads, last_seq, bad;
  uint64_t next_n[2]; /* per writer (n's top bit): the next record expected */
  int any_order;      /* two writers: numbers may come out of ring order */
  unsigned char seen[MAX_SEQ]; /* any_order: the numbers read */
};

/* Consumes everything written so far; returns the number of records. */
static uint64_t consume(struct reader *rd) {
  uint64_t got = 0;
  for (;;) {
    uint64_t rp = __atomic_load_n(&meta.read_pos, __ATOMIC_RELAXED);
    uint64_t off = rp & (DATA_SIZE - 1);
    uint64_t hdr = __atomic_load_n((uint64_t *)(data + off), __ATOMIC_ACQUIRE);
    if (hdr == 0)
      return got;
    uint32_t size = HS_RECORD_SIZE(hdr), type = HS_RECORD_TYPE(hdr);
    CHECK(size >= 8 && size % 8 == 0 && off + size <= DATA_SIZE, "record of %u bytes at %lu", size,
          (unsigned long)off);
    if (!(size >= 8 && size % 8 == 0 && off + size <= DATA_SIZE)) {
      rd->bad++;
      return got;
    }
    if (type == HS_REC_PAD) {
      CHECK(off + size == DATA_SIZE, "a pad that does not end the data area");
      rd->pads++;
    } else {
      struct body b;
      memcpy(&b, data + off + 8, sizeof b);
      size_t len = b.n % 300;
      CHECK(type == HS_REC_MALLOC, "type %u", type);
      CHECK(b.n == b.n2, "body corrupt: %lu %lu", (unsigned long)b.n, (unsigned long)b.n2);
      CHECK(size == HS_ALIGN8(8 + sizeof b + len), "size %u for a tail of %zu", size, len);
      unsigned char want[300];
      tail_of(b.n, want, len);
      CHECK(memcmp(data + off + 8 + sizeof b, want, len) == 0, "tail of record %lu", (unsigned long)b.n);
      if (rd->any_order) {
        CHECK(b.seq >= 1 && b.seq < MAX_SEQ && !rd->seen[b.seq], "seq %lu out of range or repeated",
              (unsigned long)b.seq);
        if (b.seq >= 1 && b.seq < MAX_SEQ)
          rd->seen[b.seq] = 1;
        if (b.seq > rd->last_seq)
          rd->last_seq = b.seq;
      } else {
        CHECK(b.seq == rd->last_seq + 1, "seq %lu after %lu", (unsigned long)b.seq,
              (unsigned long)rd->last_seq);
        rd->last_seq = b.seq;
      }
      unsigned w = (unsigned)(b.n >> 63);
      CHECK((b.n & ~(UINT64_C(1) << 63)) == rd->next_n[w], "writer %u: record %lu, expected %lu", w,
            (unsigned long)(b.n & ~(UINT64_C(1) << 63)), (unsigned long)rd->next_n[w]);
      rd->next_n[w] = (b.n & ~(UINT64_C(1) << 63)) + 1;
      rd->records++;
      got++;
    }
    memset(data + off, 0, size);
    __atomic_store_n(&meta.read_pos, rp + size, __ATOMIC_RELEASE);
  }
}

static int write_n(struct hs_ring *r, uint64_t n) {
  struct body b = {0, n, n};
  unsigned char tail[300];
  size_t len = n % 300;
  tail_of(n, tail, len);
  return hs_ring_write(r, HS_REC_MALLOC, &b, sizeof b, len ? tail : NULL, len, 1);
}

/* One writer, the reader at random moments: every record back, in order,
 * with the pads the wraps need; the ring never overwrites unread data. */
static void single_writer(void) {
  struct hs_ring r = ring_new();
  static struct reader rd;
  memset(&rd, 0, sizeof rd);
  uint64_t n = 0, dropped = 0;
  for (int i = 0; i < 200000; i++) {
    int rc = write_n(&r, n);
    CHECK(rc == HS_OK || rc == HS_DROPPED, "rc %d", rc);
    if (rc == HS_OK)
      n++;
    else
      dropped++;
    if (rnd() % 8 == 0 || rc == HS_DROPPED)
      consume(&rd);
    if (rd.bad)
      return;
  }
  consume(&rd);
  CHECK(rd.records == n, "read %lu of %lu", (unsigned long)rd.records, (unsigned long)n);
  CHECK(rd.pads > 0, "no wrap happened");
  CHECK(dropped > 0, "the ring was never full");
  CHECK(meta.dropped_records == dropped, "dropped %lu, counted %lu", (unsigned long)dropped,
        (unsigned long)meta.dropped_records);
  CHECK(seq_counter == n + 1, "a dropped record took a sequence number");
  CHECK(meta.read_pos == meta.write_pos, "positions %lu %lu", (unsigned long)meta.read_pos,
        (unsigned long)meta.write_pos);
}

static void refusals(void) {
  struct hs_ring r = ring_new();
  static unsigned char big[DATA_SIZE];
  CHECK(hs_ring_write(&r, HS_REC_MALLOC, big, DATA_SIZE / 2, NULL, 0, 0) == -HS_ERR_RECORD_TOO_BIG,
        "a record over half the ring");
  CHECK(meta.write_pos == 0, "a refused record moved write_pos");
  /* read_pos ahead of write_pos: nonsense from shared memory, taken as full. */
  meta.write_pos = 64;
  meta.read_pos = 128;
  CHECK(write_n(&r, 1) == HS_DROPPED, "rp > wp not taken as full");
  CHECK(meta.write_pos == 64, "write_pos moved on nonsense");
  meta.read_pos = 64;
  meta.shutting_down = 1;
  CHECK(write_n(&r, 1) == -HS_ERR_SHUTTING_DOWN, "wrote while shutting down");
  CHECK(meta.write_pos == 64, "write_pos moved while shutting down");
}

/* Two writers and the reader at once: the sequence has no gap and each
 * writer's records keep their order. */
static volatile int writers_done, stop;

static void *writer(void *arg) {
  struct hs_ring *r = arg;
  static __thread uint64_t n;
  uint64_t top = (uint64_t)(r->block) << 63; /* block doubles as the writer index here */
  r->block = 0;
  /* Bounded: a ring that never takes a record must fail the checks, not
   * hang. By time, not attempts: on a loaded machine the reader thread may
   * not run for a while, and the writers spin on a full ring meanwhile. */
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint64_t attempts = n = 0; n < 30000 && !stop; attempts++) {
    int rc = write_n(r, n | top);
    if (rc == HS_OK) {
      n++;
    } else if (rc != HS_DROPPED) {
      CHECK(0, "writer: rc %d", rc);
      break;
    } else if ((attempts & 0xffff) == 0) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec - t0.tv_sec > 60)
        break;
    }
  }
  __atomic_fetch_add(&writers_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void two_writers(void) {
  struct hs_ring base = ring_new();
  struct hs_ring r[2] = {base, base};
  r[0].block = 0;
  r[1].block = 1;
  static struct reader rd;
  memset(&rd, 0, sizeof rd);
  rd.any_order = 1;
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, writer, &r[i]);
  while (__atomic_load_n(&writers_done, __ATOMIC_ACQUIRE) < 2 && !rd.bad)
    consume(&rd);
  stop = 1;
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  consume(&rd);
  CHECK(rd.next_n[0] == 30000 && rd.next_n[1] == 30000, "read %lu and %lu records",
        (unsigned long)rd.next_n[0], (unsigned long)rd.next_n[1]);
  CHECK(seq_counter == rd.last_seq + 1, "sequence %lu, last read %lu", (unsigned long)seq_counter,
        (unsigned long)rd.last_seq);
  uint64_t missing = 0;
  for (uint64_t s = 1; s < seq_counter && s < MAX_SEQ; s++)
    missing += !rd.seen[s];
  CHECK(missing == 0, "%lu sequence numbers never read", (unsigned long)missing);
}

int main(void) {
  single_writer();
  refusals();
  two_writers();
  return check_status();
}
