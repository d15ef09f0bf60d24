/*
 * connect.c: see connect.h.
 *
 * Descriptors: the client keeps one, the socket, and programs close and
 * reuse descriptors they did not open (daemons: a close loop up to the
 * limit, closefrom(3), dup2 over low numbers). The socket is moved above
 * the numbers programs reuse (keep_high), pinned open so that closing the
 * descriptor does not end the connection (pin_socket), and never trusted
 * without checking its identity (hs_sock_is_ours: the fork child's close,
 * the ring wait's liveness check). libunwind's own pipe is taken away
 * altogether (unwind.c, tame_libunwind).
 */
#include "connect.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "own.h"
#include "ring.h"
#include "state.h"

struct hs_conn hs_conn = {.sock = -1};


/* Bound of one wait for ring space in blocking mode: the producer drains
 * the ring continuously, so a wait this long means it stopped reading. 10 s
 * by default; HEAPSCOPE_MAX_WAIT_MS overrides it (the tests use a short
 * one). */
static uint64_t max_wait_ns(void) {
  uint64_t ms = 10000;
  const char *s = secure_getenv("HEAPSCOPE_MAX_WAIT_MS");
  if (s && *s) {
    uint64_t v = 0;
    int digits = 0;
    for (; *s >= '0' && *s <= '9' && digits < 9; s++, digits++)
      v = v * 10 + (uint64_t)(*s - '0');
    if (*s == '\0' && v > 0)
      ms = v;
  }
  return ms * 1000000u;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static HS_MUST_CHECK int parse_token(const char *s, uint8_t *out) {
  if (!s || strlen(s) != 2 * HS_TOKEN_SIZE)
    return -1;
  for (int i = 0; i < HS_TOKEN_SIZE; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

static HS_MUST_CHECK int send_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Receives the config and the memfd that comes with its first bytes. */
static HS_MUST_CHECK int recv_config(int fd, struct hs_config *cfg, int *memfd) {
  char *p = (char *)cfg;
  size_t got = 0;
  *memfd = -1;
  while (got < sizeof *cfg) {
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {p + got, sizeof *cfg - got};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        continue;
      size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      int fds[4];
      memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
      for (size_t i = 0; i < nfds; i++) {
        if (*memfd < 0)
          *memfd = fds[i];
        else
          close(fds[i]); /* unexpected extra descriptors */
      }
    }
  }
  if (got < sizeof *cfg) {
    if (*memfd >= 0)
      close(*memfd);
    *memfd = -1;
    return -1;
  }
  return 0;
}

/* Moves fd out of the way of the program: programs reuse the lowest free
 * numbers, and daemons close everything they did not open, commonly with a
 * loop up to the soft RLIMIT_NOFILE (sysconf(_SC_OPEN_MAX)). When the hard
 * limit allows and the soft one is at most ABOVE_MAX, the socket goes just
 * above the soft limit (raised for the one F_DUPFD_CLOEXEC, then put back: a
 * descriptor keeps working above the limit), where neither such a loop nor
 * the program's own opens reach it; else below it, at 7/8 of the limit but
 * no higher than BELOW_MAX. closefrom()/close_range() still close it: the
 * identity check (hs_sock_is_ours) notices that, and the client stops.
 * Returns the new descriptor (the old one is closed), or fd unchanged. */
static int keep_high(int fd) {
  /* The kernel's descriptor table grows to hold the highest number in use,
   * and every fork copies it: at 7/8 of a container's common limit of 2^20
   * each process of a tree allocated and copied an 8 MiB table. Below a limit
   * a close loop reaches the socket wherever it is, so higher gains nothing. */
  enum { ABOVE_MAX = 4096, BELOW_MAX = 1000 };
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < 64)
    return fd;
  int moved = -1;
  rlim_t soft = rl.rlim_cur;
  if (soft <= ABOVE_MAX && (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > soft + 16)) {
    struct rlimit raised = {soft + 16, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      moved = fcntl(fd, F_DUPFD_CLOEXEC, (int)soft);
      (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  if (moved < 0) {
    rlim_t below = soft - soft / 8;
    moved = fcntl(fd, F_DUPFD_CLOEXEC, (int)(below < BELOW_MAX ? below : BELOW_MAX));
  }
  if (moved < 0)
    return fd;
  close(fd);
  return moved;
}

/* Keeps the socket open even after the program closed every descriptor
 * (closefrom(3), a close loop up to a limit the socket could not be kept
 * above): the producer takes the socket's EOF for the process's exit, so a
 * socket closed by the program would end its profile early. The pin is an
 * io_uring with the socket as its one registered file: the ring's mapping
 * holds the io_uring, which holds the socket, whatever happens to the
 * descriptors of either. Nothing unmaps it: it goes, and the socket with it,
 * when the address space does (exit, exec), which is exactly the EOF the
 * producer waits for. MADV_DONTFORK keeps it out of fork children, which
 * must not hold their parent's socket open. Returns 1 when pinned; 0 where
 * io_uring is missing or forbidden (kernel.io_uring_disabled), or under a
 * seccomp filter (seccomp_maybe):
 * then a lost socket is detected (hs_sock_is_ours) rather than survived. */
/* 1 unless /proc/self/status says the process runs under no seccomp
 * filter. A filter set up before us (a container, a service manager) may
 * kill on a system call it does not know, and io_uring is a common one to
 * leave out. Plain open/read: no stdio, no allocation. */
static int seccomp_maybe(void) {
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 1;
  buf[n] = '\0';
  const char *line = strstr(buf, "\nSeccomp:");
  if (!line)
    return 1;
  line += strlen("\nSeccomp:");
  while (*line == ' ' || *line == '\t')
    line++;
  return *line != '0';
}

static int pin_socket(int fd) {
#ifdef SYS_io_uring_setup
  const char *pin = secure_getenv("HEAPSCOPE_PIN_SOCKET");
  if (pin && strcmp(pin, "0") == 0)
    return 0; /* the tests' way to take the detection path */
  if (seccomp_maybe())
    return 0;
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  int ring = (int)syscall(SYS_io_uring_setup, 1, &p);
  if (ring < 0)
    return 0;
  size_t len = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING);
  int fds[1] = {fd};
  int ok = m != MAP_FAILED && madvise(m, len, MADV_DONTFORK) == 0 &&
           syscall(SYS_io_uring_register, ring, IORING_REGISTER_FILES, fds, 1) == 0;
  if (!ok && m != MAP_FAILED)
    munmap(m, len);
  close(ring);
  return ok;
#else
  (void)fd;
  return 0;
#endif
}

/* The second half of the connect: maps the ring the producer sent (memfd,
 * closed here), checks its header, moves and pins the socket and sets the
 * session's ring. 0, or -1 with fd closed. */
static HS_MUST_CHECK int map_ring(int fd, int memfd, const struct hs_config *cfg) {
  size_t len = HS_META_SIZE + cfg->ring_size;
  void *shm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  close(memfd);
  if (shm == MAP_FAILED) {
    hs_debug("cannot map the ring, errno", (uint64_t)errno);
    close(fd);
    return -1;
  }
  struct hs_ring_meta *m = shm;
  if (m->magic != HS_WIRE_MAGIC || m->version != HS_WIRE_VERSION ||
      m->ring_size != cfg->ring_size) {
    hs_debug("bad ring header", UINT64_MAX);
    munmap(shm, len);
    close(fd);
    return -1;
  }
  fd = keep_high(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    munmap(shm, len);
    close(fd);
    return -1;
  }
  hs_conn.sock = fd;
  hs_conn.pid = getpid();
  hs_conn.sock_dev = (uint64_t)st.st_dev;
  hs_conn.sock_ino = (uint64_t)st.st_ino;
  hs_session.ring.sock_dev = hs_conn.sock_dev;
  hs_session.ring.sock_ino = hs_conn.sock_ino;
  hs_session.ring.sock_pinned = pin_socket(fd);
  hs_debug("socket descriptor", (uint64_t)fd);
  hs_debug("socket pinned", (uint64_t)hs_session.ring.sock_pinned);
  hs_session.ring.max_wait_ns = max_wait_ns();
  hs_own_map(shm, len, HS_OWN_SHARED);
  hs_session.ring.meta = m;
  hs_session.ring.data = (unsigned char *)shm + HS_META_SIZE;
  hs_session.ring.size = cfg->ring_size;
  hs_session.ring.block = (cfg->flags & HS_CFG_BLOCK_CLIENT) != 0;
#if defined(__x86_64__)
  hs_session.tsc = (cfg->flags & HS_CFG_TSC) != 0;
#else
  hs_session.tsc = 0; /* never asked of another architecture (producer/tsc.py) */
#endif
  hs_session.ring.sock = fd;
  hs_session.ring.seq = &hs_malloc_seq.next;
  return 0;
}

/* Connects and maps the ring. Returns 0 when profiling can start. */
int hs_connect_producer(const char *path, const char *token, struct hs_config *cfg) {
  struct hs_hello hello;
  memset(&hello, 0, sizeof hello);
  if (parse_token(token, hello.token) != 0) {
    hs_debug("bad or missing " HS_ENV_TOKEN, UINT64_MAX);
    return -1;
  }
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t plen = strlen(path);
  if (plen == 0 || plen >= sizeof sa.sun_path) {
    hs_debug("socket path too long", plen);
    return -1;
  }
  memcpy(sa.sun_path, path, plen);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct timeval tv = {10, 0};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
      connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    hs_debug("cannot connect, errno", (uint64_t)errno);
    close(fd);
    return -1;
  }
  hello.magic = HS_WIRE_MAGIC;
  hello.version = HS_WIRE_VERSION;
  hello.pid = (uint32_t)getpid();
  hello.ppid = (uint32_t)getppid();
  hello.start_ts = hs_mono_ns(); /* the records' clock: no sample of this process is earlier */
  int memfd = -1;
  if (send_all(fd, &hello, sizeof hello) != 0 || recv_config(fd, cfg, &memfd) != 0) {
    hs_debug("handshake failed, errno", (uint64_t)errno);
    close(fd);
    return -1;
  }
  if (cfg->magic != HS_WIRE_MAGIC || cfg->version != HS_WIRE_VERSION ||
      cfg->status != HS_STATUS_OK || memfd < 0 || cfg->interval < 1 ||
      cfg->ring_size < HS_RING_MIN_SIZE || (cfg->ring_size & (cfg->ring_size - 1)) ||
      cfg->ring_size > HS_RING_MAX_SIZE || cfg->unwinder > HS_UNWINDER_NONE) {
    hs_debug("rejected by the producer, status", cfg->status);
    if (memfd >= 0)
      close(memfd);
    close(fd);
    return -1;
  }
  return map_ring(fd, memfd, cfg);
}
