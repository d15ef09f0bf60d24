/* client_fds: a daemon that gets rid of its inherited descriptors, then opens
 * its own in the freed numbers and allocates while using them.
 *
 *   client_fds HOW KIND
 *     HOW:  loop      close(fd) for every fd from 3 to sysconf(_SC_OPEN_MAX)
 *           closefrom close_range(3, ~0U, 0) (what closefrom(3) does)
 *           dup2      dup2(/dev/null, fd) over every fd from 3 to the limit,
 *                     then close them
 *     KIND: socket | pipe | file: what the program opens in the low slots
 *
 * Ground truth at -i 1: fds_before() makes 100 allocations of 2000+i bytes
 * (i < 100) before the descriptors go, all freed; fds_after() makes 200 of
 * 1000+i bytes (i < 200) after, of which the last 50 stay live:
 *   fds_before: alloc_space 204950, alloc_objects 100, space 0, objects 0
 *   fds_after:  alloc_space 219900, alloc_objects 200, space 58725, objects 50
 *   fds_late:   alloc_space 12800000, alloc_objects 200000, space 0, objects 0
 * (fds_after is called below fds_deep frames of 4 KiB each, on fresh stack
 * pages.) The program checks that its own descriptors carried exactly its bytes (no
 * byte read away, none written by anyone else) and prints what it saw.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLOTS 8

static __attribute__((noinline)) void *fds_before(size_t n) { return malloc(n); }
static __attribute__((noinline)) void *fds_after(size_t n) { return malloc(n); }

/* A longer run after the descriptors went: a producer that took their
 * closing for the end of the process would miss most of it. */
static __attribute__((noinline)) void fds_late(void) {
  for (int i = 0; i < 200000; i++)
    free(malloc(64));
}

/* Allocates from stack pages no earlier sample touched (unwinders cache
 * what they validated per page), some levels below the caller. */
static __attribute__((noinline)) void *fds_deep(size_t n, int levels) {
  volatile char page[4096];
  page[0] = (char)levels;
  if (levels > 0)
    return fds_deep(n, levels - 1);
  void *p = fds_after(n);
  return page[0] == 0 ? p : NULL;
}

static void drop_descriptors(const char *how) {
  long max = sysconf(_SC_OPEN_MAX);
  if (strcmp(how, "loop") == 0) {
    for (long fd = 3; fd < max; fd++)
      close((int)fd);
  } else if (strcmp(how, "closefrom") == 0) {
    syscall(SYS_close_range, 3u, ~0u, 0u);
  } else if (strcmp(how, "dup2") == 0) {
    int null = open("/dev/null", O_RDWR);
    for (long fd = 3; fd < max; fd++)
      if (fd != null)
        dup2(null, (int)fd);
    for (long fd = 3; fd < max; fd++)
      close((int)fd);
  } else {
    fprintf(stderr, "unknown HOW %s\n", how);
    exit(2);
  }
}

struct chan {
  int rd, wr;
};

static int open_chan(const char *kind, struct chan *c, int i) {
  if (strcmp(kind, "socket") == 0) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
      return -1;
    c->rd = sv[0];
    c->wr = sv[1];
  } else if (strcmp(kind, "pipe") == 0) {
    int p[2];
    if (pipe(p) != 0)
      return -1;
    c->rd = p[0];
    c->wr = p[1];
  } else {
    /* A regular file that touches no directory. */
    char name[32];
    snprintf(name, sizeof name, "client-fds-%d", i);
    int fd = memfd_create(name, 0);
    if (fd < 0)
      return -1;
    c->rd = c->wr = fd;
  }
  return 0;
}

/* Sends a message through c and checks that exactly it comes back. */
static int check_chan(const char *kind, struct chan *c, int i) {
  char msg[32], got[64];
  int len = snprintf(msg, sizeof msg, "message %d", i);
  if (strcmp(kind, "file") == 0 && (ftruncate(c->wr, 0) != 0 || lseek(c->wr, 0, SEEK_SET) != 0))
    return 0;
  if (write(c->wr, msg, (size_t)len) != len)
    return 0;
  if (strcmp(kind, "file") == 0) {
    struct stat st;
    if (fstat(c->rd, &st) != 0 || st.st_size != len)
      return 0; /* someone else wrote into our file */
    lseek(c->rd, 0, SEEK_SET);
  }
  ssize_t n = read(c->rd, got, sizeof got);
  if (n != len || memcmp(got, msg, (size_t)len) != 0)
    return 0;
  if (strcmp(kind, "file") != 0) {
    /* Nothing more is pending: nobody wrote into our channel. */
    int fl = fcntl(c->rd, F_GETFL);
    fcntl(c->rd, F_SETFL, fl | O_NONBLOCK);
    n = read(c->rd, got, sizeof got);
    fcntl(c->rd, F_SETFL, fl);
    if (n != -1)
      return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: client_fds loop|closefrom|dup2 socket|pipe|file\n");
    return 2;
  }
  const char *how = argv[1], *kind = argv[2];
  for (int i = 0; i < 100; i++)
    free(fds_before(2000 + (size_t)i));
  fflush(stdout);
  drop_descriptors(how);
  struct chan chans[SLOTS];
  for (int i = 0; i < SLOTS; i++) {
    if (open_chan(kind, &chans[i], i) != 0) {
      printf("cannot open %s %d\n", kind, i);
      return 1;
    }
  }
  int lowest = chans[0].rd;
  void *keep[200];
  int good = 0;
  for (int i = 0; i < 200; i++) {
    keep[i] = fds_deep(1000 + (size_t)i, 4 + i % 4);
    if (i % 25 == 0)
      good += check_chan(kind, &chans[(i / 25) % SLOTS], i);
  }
  for (int i = 0; i < 150; i++)
    free(keep[i]);
  for (int i = 0; i < SLOTS; i++)
    good += check_chan(kind, &chans[i], 1000 + i);
  fds_late();
  printf("%s %s: lowest descriptor %d, %d of %d exchanges intact\n", how, kind, lowest, good,
         8 + SLOTS);
  return good == 8 + SLOTS ? 0 : 1;
}
