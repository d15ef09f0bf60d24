/* ring.c: see ring.h. */
#include "ring.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

uint64_t hs_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int hs_sock_is_ours(int fd, uint64_t dev, uint64_t ino) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0)
    return 0;
  return S_ISSOCK(st.st_mode) && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

/* HS_OK while the producer's end of our socket is open. Identity first: a
 * descriptor the program reopened (a socket, a pipe, a file) in our slot
 * would otherwise answer for the producer, or be read from. Then EOF (0) or
 * a hard error means the producer is gone; EAGAIN means alive with nothing
 * to say. */
static int producer_check(const struct hs_ring *r) {
  if (!hs_sock_is_ours(r->sock, r->sock_dev, r->sock_ino))
    /* Pinned: the producer still has its connection and reads the ring;
     * only the wait's bound can end the wait now. */
    return r->sock_pinned ? HS_OK : -HS_ERR_SOCKET_LOST;
  char c;
  ssize_t n = recv(r->sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0)
    return HS_OK;
  if (n == 0)
    return -HS_ERR_PRODUCER_GONE;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? HS_OK
                                                                   : -HS_ERR_PRODUCER_GONE;
}

#define SPINS_BEFORE_SLEEP 128
#define SLEEP_NS 75000
#define LIVENESS_EVERY_NS 1000000
/* With its socket gone (unpinned), the client cannot ask whether the
 * producer lives; it still reads the ring (it follows the process by pidfd),
 * so a wait goes on while read_pos moves and ends once it stood still this
 * long (or half the wait's bound, if shorter). A loaded machine can keep the
 * producer off the CPU for a while: giving up at the first full ring lost the
 * rest of the recording (tests/fault: test_unpinned_socket_lost_never_hangs). */
#define LOST_GRACE_NS 1000000000u

static uint64_t lost_grace_ns(const struct hs_ring *r) {
  return r->max_wait_ns / 2 < LOST_GRACE_NS ? r->max_wait_ns / 2 : LOST_GRACE_NS;
}

/* A full ring is told to the producer at once, not left for its next poll
 * (its loop naps up to 5 ms between rounds when it drained little): one
 * byte on the socket, which its poll() sees as readable; it drains every
 * ring, then reads and drops the byte (producer.py, _peer_closed). On one
 * CPU this is what gets the producer onto it while the writer sleeps; on
 * two it shortens the wait. At most one a millisecond per process (the
 * callers copy struct hs_ring, so the time is kept here), none on a
 * descriptor that is no longer our socket. */
#define WAKE_EVERY_NS 1000000
static uint64_t woken_ns;

static void wake_producer(const struct hs_ring *r, uint64_t now) {
  uint64_t last = __atomic_load_n(&woken_ns, __ATOMIC_RELAXED);
  if (last && now >= last && now - last < WAKE_EVERY_NS)
    return;
  __atomic_store_n(&woken_ns, now, __ATOMIC_RELAXED);
  if (!hs_sock_is_ours(r->sock, r->sock_dev, r->sock_ino))
    return;
  static const char byte = 0;
  (void)send(r->sock, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* 1 when this thread may run on one CPU only (taskset -c 0, a 1-CPU
 * container's cpuset): spinning there only keeps the producer off the CPU
 * it needs to make room, so the wait sleeps at once. */
static int one_cpu(void) {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1;
}

/* Reserves room for one record, waiting (bounded) while the ring is full, and
 * writes it. Long on purpose: every wait's exit (shutdown, the producer lost,
 * the bound reached) is seen on the one path that holds the reservation. */
static int write_waiting(struct hs_ring *r, uint32_t type, const void *a, size_t alen,
                         const void *b, size_t blen, int take_seq) {
  struct hs_ring_meta *m = r->meta;
  uint64_t size = HS_ALIGN8(8 + alen + blen);
  if (size > r->size / 2)
    return -HS_ERR_RECORD_TOO_BIG; /* larger records may never fit after a pad */
  if (__atomic_load_n(&m->shutting_down, __ATOMIC_RELAXED))
    return -HS_ERR_SHUTTING_DOWN;

  uint64_t mask = r->size - 1;
  uint64_t wp = __atomic_load_n(&m->write_pos, __ATOMIC_RELAXED);
  uint64_t pad, off;
  unsigned spins = 0;
  uint64_t wait_start = 0, last_check = 0; /* last_check: also accounted up to */
  uint64_t rp = 0, moved_rp = 0, moved_at = 0; /* the producer's last progress seen */
  int rc = HS_OK;
  for (;;) {
    rp = __atomic_load_n(&m->read_pos, __ATOMIC_ACQUIRE);
    off = wp & mask;
    pad = off + size > r->size ? r->size - off : 0;
    /* Positions come from shared memory: compute with what we loaded, and
     * treat nonsense (rp > wp) as a full ring rather than trusting it. */
    if (rp <= wp && wp + pad + size - rp <= r->size) {
      if (__atomic_compare_exchange_n(&m->write_pos, &wp, wp + pad + size, 1,
                                      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        break;
      continue; /* wp was reloaded by the failed CAS */
    }
    /* Full. */
    if (!r->block) {
      __atomic_fetch_add(&m->dropped_records, 1, __ATOMIC_RELAXED);
      wake_producer(r, hs_now_ns());
      return HS_DROPPED;
    }
    if (__atomic_load_n(&m->shutting_down, __ATOMIC_RELAXED)) {
      rc = -HS_ERR_SHUTTING_DOWN;
      break;
    }
    if (!spins && !wait_start) {
      wake_producer(r, hs_now_ns());
      if (one_cpu())
        spins = SPINS_BEFORE_SLEEP;
    }
    if (spins < SPINS_BEFORE_SLEEP) {
      spins++;
      __builtin_ia32_pause();
    } else {
      uint64_t now = hs_now_ns();
      if (!wait_start) {
        wait_start = last_check = moved_at = now;
        moved_rp = rp;
      }
      if (rp != moved_rp) {
        moved_rp = rp;
        moved_at = now;
      }
      if (now - last_check >= LIVENESS_EVERY_NS) {
        /* blocked_ns grows while we wait, so the producer sees a stall as
         * it happens, not only once it ends. */
        __atomic_fetch_add(&m->blocked_ns, now - last_check, __ATOMIC_RELAXED);
        last_check = now;
        wake_producer(r, now); /* a wake may have come before the producer's last drain */
        rc = producer_check(r);
        if (rc == -HS_ERR_SOCKET_LOST && now - moved_at < lost_grace_ns(r))
          rc = HS_OK; /* still bounded: by the grace, or by max_wait_ns below */
        if (rc == HS_OK && now - wait_start >= r->max_wait_ns)
          rc = -HS_ERR_WAIT_TIMEOUT;
        if (rc != HS_OK)
          break;
      }
      struct timespec ts = {0, SLEEP_NS};
      nanosleep(&ts, NULL);
    }
    wp = __atomic_load_n(&m->write_pos, __ATOMIC_RELAXED);
  }
  if (wait_start)
    __atomic_fetch_add(&m->blocked_ns, hs_now_ns() - last_check, __ATOMIC_RELAXED);
  if (rc != HS_OK)
    return rc;

  if (pad) {
    /* The rest of the data area: a PAD record, header only. */
    uint64_t *hdr = (uint64_t *)(r->data + off);
    __atomic_store_n(hdr, HS_RECORD_HEADER(pad, HS_REC_PAD), __ATOMIC_RELEASE);
    off = 0;
  }
  hs_ring_fill(r->data + off, size, type, a, alen, b, blen, take_seq ? r->seq : NULL,
               hs_single_threaded());
  return HS_OK;
}

/* errno is kept here, around the wait's system calls (nanosleep, recv,
 * fstat), so that the free path need not keep it itself (record.c,
 * record_free_slow): this is the only place on that path that can set it. */
int hs_ring_write_slow(struct hs_ring *r, uint32_t type, const void *a, size_t alen, const void *b,
                       size_t blen, int take_seq) {
  int saved_errno = errno;
  int rc = write_waiting(r, type, a, alen, b, blen, take_seq);
  errno = saved_errno;
  return rc;
}
