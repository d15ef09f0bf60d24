/* own.c: the registry of heapscope's own mappings, and what of them is
 * resident (see own.h).
 *
 * Resident is read from /proc/self/pagemap (one u64 per page:
 * Documentation/admin-guide/mm/pagemap.rst in the kernel's tree), not from
 * mincore(): a table that is read before it is written (the stack table's
 * probes, the address filter) maps the shared zero page, which mincore()
 * calls resident and RSS does not count. Measured on Linux 6.18: 8 MiB of
 * anonymous memory only read were 2,048 resident pages for mincore() and
 * +0 kB of RssAnon; read in transparent huge pages, pagemap marks the huge
 * zero page as a file page. So a private page counts when it is present and
 * mapped by this process alone (bit 56), which leaves out both zero pages
 * (and, as a lower bound, a fork's copy-on-write pages still shared); a page
 * of the ring, which the producer maps too, counts when it is present here
 * (bit 63), as RssShmem counts it.
 */
#include "own.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#define OWN_MAX 4096 /* the address set's grown tables are most of them */
#define PM_PRESENT (UINT64_C(1) << 63)
#define PM_EXCLUSIVE (UINT64_C(1) << 56)
#define PM_BATCH 512 /* pagemap entries per read: 4 KiB of stack */

struct own_map {
  uintptr_t start;
  size_t len;
  uint32_t kind; /* enum hs_own_kind */
  uint32_t live; /* set last (release): 1 while the mapping is ours */
};

static struct own_map own[OWN_MAX];
static uint32_t own_count; /* slots taken; may pass OWN_MAX */
static uint64_t own_unlisted; /* bytes that found no slot: counted as resident */

void hs_own_add(const void *p, size_t len, int kind) {
  if (p == NULL || len == 0)
    return;
  uint32_t i = __atomic_fetch_add(&own_count, 1, __ATOMIC_RELAXED);
  if (i >= OWN_MAX) {
    __atomic_fetch_add(&own_unlisted, (uint64_t)len, __ATOMIC_RELAXED);
    return;
  }
  own[i].start = (uintptr_t)p;
  own[i].len = len;
  own[i].kind = (uint32_t)kind;
  __atomic_store_n(&own[i].live, 1, __ATOMIC_RELEASE);
}

void hs_own_forget(const void *p) {
  uint32_t n = __atomic_load_n(&own_count, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n && i < OWN_MAX; i++)
    if (__atomic_load_n(&own[i].live, __ATOMIC_ACQUIRE) && own[i].start == (uintptr_t)p)
      __atomic_store_n(&own[i].live, 0, __ATOMIC_RELAXED);
}

/* Resident bytes of [start, start + len) by pagemap; -1 when it cannot be read. */
static int64_t resident(int fd, uintptr_t start, size_t len, uint32_t kind, size_t ps) {
  uint64_t buf[PM_BATCH];
  uint64_t page = start / ps, end = (start + len + ps - 1) / ps, pages = 0;
  while (page < end) {
    size_t want = end - page < PM_BATCH ? (size_t)(end - page) : PM_BATCH;
    ssize_t got = pread(fd, buf, want * sizeof buf[0], (off_t)(page * sizeof buf[0]));
    if (got < (ssize_t)sizeof buf[0])
      return -1;
    size_t k = (size_t)got / sizeof buf[0];
    for (size_t i = 0; i < k; i++)
      pages += (buf[i] & PM_PRESENT) && (kind == HS_OWN_SHARED || (buf[i] & PM_EXCLUSIVE));
    page += k;
  }
  return (int64_t)(pages * ps);
}

struct segments {
  int fd;
  size_t ps;
  int64_t bytes; /* -1: a read failed */
};

/* The writable segments of this library (its .data and .bss: the static
 * tables of every client file). */
static int own_segments(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct segments *s = arg;
  uintptr_t me = (uintptr_t)&own_count;
  int ours = 0;
  for (int i = 0; i < info->dlpi_phnum && !ours; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    ours = ph->p_type == PT_LOAD && me >= lo && me < lo + ph->p_memsz;
  }
  if (!ours)
    return 0;
  for (int i = 0; i < info->dlpi_phnum && s->bytes >= 0; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
      continue;
    uintptr_t lo = (info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)(s->ps - 1);
    int64_t r = resident(s->fd, lo, info->dlpi_addr + ph->p_vaddr + ph->p_memsz - lo, HS_OWN_PRIVATE, s->ps);
    s->bytes = r < 0 ? -1 : s->bytes + r;
  }
  return 1;
}

uint64_t hs_own_resident(void) {
  int saved_errno = errno;
  long ps = sysconf(_SC_PAGESIZE);
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ps <= 0) {
    if (fd >= 0)
      close(fd);
    errno = saved_errno;
    return 0;
  }
  struct segments s = {fd, (size_t)ps, 0};
  uint32_t n = __atomic_load_n(&own_count, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n && i < OWN_MAX && s.bytes >= 0; i++) {
    if (!__atomic_load_n(&own[i].live, __ATOMIC_ACQUIRE))
      continue;
    int64_t r = resident(fd, own[i].start, own[i].len, own[i].kind, s.ps);
    s.bytes = r < 0 ? -1 : s.bytes + r;
  }
  if (s.bytes >= 0)
    dl_iterate_phdr(own_segments, &s);
  close(fd);
  errno = saved_errno;
  if (s.bytes < 0)
    return 0;
  return (uint64_t)s.bytes + __atomic_load_n(&own_unlisted, __ATOMIC_RELAXED);
}

uint64_t hs_own_peak_rss(void) {
  static const char key[] = "\nVmHWM:";
  int saved_errno = errno;
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errno = saved_errno;
    return 0;
  }
  /* Read in pieces; the last bytes of one piece are kept in front of the
   * next, so a line cut between two reads is still found whole. */
  char buf[2048];
  size_t kept = 0;
  uint64_t kib = 0;
  int found = 0;
  for (;;) {
    ssize_t r = read(fd, buf + kept, sizeof buf - 1 - kept);
    if (r <= 0)
      break;
    size_t used = kept + (size_t)r;
    buf[used] = '\0';
    const char *at = strstr(buf, key);
    if (at && memchr(at + 1, '\n', (size_t)(buf + used - (at + 1)))) {
      at += sizeof key - 1;
      while (*at == ' ' || *at == '\t')
        at++;
      while (*at >= '0' && *at <= '9')
        kib = kib * 10 + (uint64_t)(*at++ - '0');
      found = 1;
      break;
    }
    kept = used < 64 ? used : 64; /* "\nVmHWM:" and its number fit */
    memmove(buf, buf + used - kept, kept);
  }
  close(fd);
  errno = saved_errno;
  return found ? kib * 1024 : 0;
}
