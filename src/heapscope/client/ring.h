/*
 * ring.h: the writer side of the shared ring (the protocol is in wire.h).
 *
 * Any thread may write. A record is reserved with a CAS loop on write_pos,
 * its body is copied in, and its 8-byte header is stored last with release
 * order; the reader stops at a zero header, so the ring stays FIFO. A record
 * that would cross the end of the data area is preceded by an HS_REC_PAD
 * record filling the rest (reserved in the same CAS).
 *
 * When the ring is full the writer first wakes the producer (one byte on
 * the socket, at most one a millisecond per process: ring.c, wake_producer).
 * Then with HS_CFG_BLOCK_CLIENT it waits (spins a little, unless it may run
 * on one CPU only, where a spin keeps the producer off the CPU it needs;
 * then sleeps ~75 us at a time), watching meta.shutting_down and,
 * every millisecond, whether the producer is still alive (EOF on the
 * socket) and whether the descriptor is still our socket (hs_sock_is_ours:
 * a program that closed it and opened a file of its own in the same slot
 * must not be taken for the producer; when the socket itself is pinned open,
 * a lost descriptor only means the wait cannot watch the producer any more).
 * The whole wait is bounded by
 * max_wait_ns: past it the writer gives up with HS_ERR_WAIT_TIMEOUT and the
 * client disables itself. Without HS_CFG_BLOCK_CLIENT a record that does not
 * fit is dropped and counted.
 */
#ifndef HEAPSCOPE_CLIENT_RING_H
#define HEAPSCOPE_CLIENT_RING_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "wire.h"

struct hs_ring {
  struct hs_ring_meta *meta;
  unsigned char *data;
  uint64_t size; /* power of two */
  int block;     /* HS_CFG_BLOCK_CLIENT */
  int sock;      /* for the liveness check while blocked */
  uint64_t sock_dev, sock_ino; /* identity of sock, taken at connect */
  int sock_pinned;             /* the socket outlives sock (connect.c, pin_socket) */
  uint64_t max_wait_ns;        /* bound of one wait for space */
  uint64_t *seq; /* the process-wide sequence counter */
};

/* 1 when fd is still the socket whose identity (device, inode) was taken at
 * connect; 0 when the program closed it or put something else in its slot.
 * Async-signal-safe (one fstat), so the fork child handler may call it. */
HS_HIDDEN int hs_sock_is_ours(int fd, uint64_t dev, uint64_t ino);

/* Writes one record of `type` whose body is a[0..alen) followed by
 * b[0..blen). When take_seq is set, the first 8 bytes of the body are
 * replaced by a fresh sequence number, taken after the space is reserved:
 * a dropped record therefore never leaves a hole in the sequence.
 * Returns HS_OK, HS_DROPPED, or -(enum hs_client_error) when the client must
 * stop. Never blocks forever. hs_ring_write is its common case inlined (one
 * reservation attempt that finds room without a pad, and copies of sizes the
 * caller's compiler knows); everything else goes to hs_ring_write_slow. */
HS_HIDDEN HS_MUST_CHECK int hs_ring_write_slow(struct hs_ring *r, uint32_t type, const void *a,
                                              size_t alen, const void *b, size_t blen,
                                              int take_seq);

/* glibc (2.32 and later) keeps this true while the process has a single
 * thread: pthread_create clears it before the new thread runs; only the
 * fork child sets it again (glibc's manual, "Single-Threaded"). While it is
 * true no other thread can run our code: the only thread is here, under its
 * guard, so signal handlers do not come in either (they see the guard) and
 * it does not create a thread before it leaves. The writers below then do
 * without locked instructions (each a full barrier, the bulk of a sample's
 * cost in git log -p: lock xadd, lock cmpxchg, xchg): plain
 * loads and stores do the same there. The producer, another process, only
 * reads write_pos and the headers, which stay ordered as before (release).
 * Weak and of default visibility, so that a libc without it gives a null
 * address (then: always the locked path) rather than a hidden 0. */
extern char __libc_single_threaded __attribute__((weak, visibility("default")));

static inline __attribute__((always_inline)) int hs_single_threaded(void) {
  const char *p = &__libc_single_threaded;
  return p != NULL && __atomic_load_n(p, __ATOMIC_RELAXED) != 0;
}

/* The body and header of a reserved record at dst (see hs_ring_write);
 * single: hs_single_threaded(), as the caller read it.
 * Always inlined, as hs_ring_write: with the sizes known the copies are a
 * few moves, where an out-of-line copy of unknown size was a rep movsq. */
static inline __attribute__((always_inline)) void
hs_ring_fill(unsigned char *dst, uint64_t size, uint32_t type, const void *a, size_t alen,
             const void *b, size_t blen, uint64_t *seq_counter, int single) {
  if (alen)
    __builtin_memcpy(dst + 8, a, alen);
  if (blen)
    __builtin_memcpy(dst + 8 + alen, b, blen);
  if (seq_counter) {
    uint64_t seq;
    if (single) {
      seq = __atomic_load_n(seq_counter, __ATOMIC_RELAXED);
      __atomic_store_n(seq_counter, seq + 1, __ATOMIC_RELAXED);
    } else {
      seq = __atomic_fetch_add(seq_counter, 1, __ATOMIC_RELAXED);
    }
    __builtin_memcpy(dst + 8, &seq, sizeof seq);
  }
  /* Tail padding is already zero: the reader zeroes what it consumed. */
  __atomic_store_n((uint64_t *)dst, HS_RECORD_HEADER(size, type), __ATOMIC_RELEASE);
}

/* The common case of a write, in two halves for a caller that builds its
 * record in place (record.c, the MALLOC record of a sample: no copy from
 * the stack). hs_ring_reserve takes `size` bytes (HS_ALIGN8, header
 * included) when they fit at once, without a pad, and returns 1 with *dst
 * where the record goes (its body at + 8); 0: nothing reserved, write the
 * record with hs_ring_write_slow instead. (A status, not a NULL *dst: the
 * compiler cannot know data + off is not NULL, and tested it on every
 * write.) *single is hs_single_threaded(), for hs_ring_commit, which takes
 * the sequence number (when seq is set) and stores the header. */
static inline __attribute__((always_inline)) int hs_ring_reserve(struct hs_ring *r, uint64_t size,
                                                                 unsigned char **dst,
                                                                 int *single) {
  struct hs_ring_meta *m = r->meta;
  /* Every ring holds at least HS_RING_MIN_SIZE (the handshake checks it):
   * a record of a size known here and at most half of that (MALLOC, FREE)
   * needs no comparison with this ring's. */
  if (HS_UNLIKELY((size > HS_RING_MIN_SIZE / 2 && size > r->size / 2) ||
                  __atomic_load_n(&m->shutting_down, __ATOMIC_RELAXED)))
    return 0;
  uint64_t wp = __atomic_load_n(&m->write_pos, __ATOMIC_RELAXED);
  uint64_t rp = __atomic_load_n(&m->read_pos, __ATOMIC_ACQUIRE);
  uint64_t off = wp & (r->size - 1);
  /* As in the slow path: positions come from shared memory, so rp > wp
   * counts as full; a record that would need a pad goes there too. */
  if (HS_UNLIKELY(off + size > r->size || rp > wp || wp + size - rp > r->size))
    return 0;
  /* Read once: the stores below could alias the flag for the compiler. */
  *single = hs_single_threaded();
  if (*single)
    __atomic_store_n(&m->write_pos, wp + size, __ATOMIC_RELEASE); /* no other writer */
  else if (HS_UNLIKELY(!__atomic_compare_exchange_n(&m->write_pos, &wp, wp + size, 1,
                                                    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)))
    return 0;
  *dst = r->data + off;
  return 1;
}

static inline __attribute__((always_inline)) void hs_ring_commit(unsigned char *dst, uint64_t size,
                                                                 uint32_t type,
                                                                 uint64_t *seq_counter,
                                                                 int single) {
  hs_ring_fill(dst, size, type, NULL, 0, NULL, 0, seq_counter, single);
}

static inline __attribute__((always_inline)) HS_MUST_CHECK int
hs_ring_write(struct hs_ring *r, uint32_t type, const void *a, size_t alen, const void *b,
              size_t blen, int take_seq) {
  uint64_t size = HS_ALIGN8(8 + alen + blen);
  int single;
  unsigned char *dst;
  if (HS_UNLIKELY(!hs_ring_reserve(r, size, &dst, &single)))
    return hs_ring_write_slow(r, type, a, alen, b, blen, take_seq);
  hs_ring_fill(dst, size, type, a, alen, b, blen, take_seq ? r->seq : NULL, single);
  return HS_OK;
}

/* CLOCK_MONOTONIC in ns. */
HS_HIDDEN uint64_t hs_now_ns(void);

#endif
