/* Unit test driver for client/stacks.c's stack ids, built and run by
 * test_stacks.py. The id is a hash of (depth, pcs) in four lanes (stacks.c):
 * equal stacks give equal ids; two stacks of one depth that differ in one
 * frame never collide, at every depth (a tail of 0 to 3 frames past the
 * last full round of lanes included) and at every position; stacks that
 * differ only in depth, or only by two frames swapped between lanes, differ
 * too. The set (hs_stacks_intern): every id is NEW once and KNOWN after,
 * past the first table's cap (2^14 ids, stacks.h) and into the big table,
 * with ids that share a home slot in either table. The big table is one
 * mapping of 8 MiB on a 2 MiB boundary marked for huge pages (where the
 * kernel has them), a second init (a fork child's restart) leaves one such
 * mapping, not two; with too little address space for the aligned mapping
 * the table is mapped unaligned and works the same, and with none for the
 * table at all init fails and every id is FULL. Prints one line per
 * failed check and exits non-zero on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "stacks.h"

#define MAXD 140

static void one_frame_changes(void) {
  uint64_t a[MAXD], b[MAXD];
  for (uint32_t depth = 1; depth <= 131; depth++) {
    for (uint32_t i = 0; i < depth; i++)
      a[i] = 0x400000 + (rnd() & 0xffffff);
    uint64_t id = hs_stack_id(a, depth);
    CHECK(id != 0, "depth %u: id 0", depth);
    memcpy(b, a, sizeof a);
    CHECK(hs_stack_id(b, depth) == id, "depth %u: same stack, other id", depth);
    for (uint32_t i = 0; i < depth; i++) {
      memcpy(b, a, sizeof a);
      b[i] ^= (uint64_t)1 << (rnd() % 48);
      CHECK(hs_stack_id(b, depth) != id, "depth %u: frame %u changed, same id", depth, i);
      b[i] = a[i] + 1;
      CHECK(hs_stack_id(b, depth) != id, "depth %u: frame %u + 1, same id", depth, i);
    }
    if (depth >= 2) {
      /* Frames 0 and 1 are in different lanes: swapping them must show. */
      memcpy(b, a, sizeof a);
      b[0] = a[1];
      b[1] = a[0];
      CHECK(a[0] == a[1] || hs_stack_id(b, depth) != id, "depth %u: swap, same id", depth);
      /* One frame less (the same first frames). */
      CHECK(hs_stack_id(a, depth - 1) != id, "depth %u: shorter, same id", depth);
    }
  }
}

static void empty_stack(void) {
  uint64_t none[1] = {0};
  CHECK(hs_stack_id(none, 0) != 0, "empty stack: id 0");
  CHECK(hs_stack_id(none, 0) != hs_stack_id(none, 1), "empty stack and one 0 frame: same id");
}

#define IDS 100000

static uint64_t ids[IDS];

static void intern_set(void) {
  CHECK(hs_stacks_intern(12345) == HS_STACK_FULL, "before init: not FULL");
  CHECK(hs_stacks_init() == HS_OK, "init failed");
  for (uint32_t i = 0; i < IDS; i++) {
    /* One id in three shares its home slot (bits 7 and up) with the one
     * before: long probe runs in both tables. */
    ids[i] = i % 3 == 1 ? (ids[i - 1] ^ 0x55) : (rnd() | 1);
    enum hs_intern in = hs_stacks_intern(ids[i]);
    CHECK(in == HS_STACK_NEW, "id %u: first intern gives %d, not NEW", i, (int)in);
    if (i % 97 == 0) /* a known id asked again while the tables fill */
      CHECK(hs_stacks_intern(ids[i / 2]) == HS_STACK_KNOWN, "id %u: not KNOWN while filling", i / 2);
  }
  for (uint32_t i = 0; i < IDS; i++) {
    enum hs_intern in = hs_stacks_intern(ids[i]);
    CHECK(in == HS_STACK_KNOWN, "id %u: second intern gives %d, not KNOWN", i, (int)in);
  }
  /* A fork child's restart maps fresh tables: everything is new again. */
  CHECK(hs_stacks_init() == HS_OK, "second init failed");
  CHECK(hs_stacks_intern(ids[0]) == HS_STACK_NEW, "after a second init: not NEW");
  CHECK(hs_stacks_intern(ids[IDS - 1]) == HS_STACK_NEW, "after a second init: last id not NEW");
}

/* The anonymous mappings of exactly 8 MiB in /proc/self/smaps: how many, and
 * how many of those start on a 2 MiB boundary with the huge page advice
 * ("hg" in VmFlags). */
static void big_tables(int *all, int *huge) {
  *all = *huge = 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL)
    return;
  char line[512];
  int in = 0, aligned = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char path[256] = "";
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %255s", &lo, &hi, path) >= 2 && strchr(line, '-') &&
        line[0] != 'V') {
      in = hi - lo == (8ul << 20) && path[0] == 0;
      aligned = (lo & ((2ul << 20) - 1)) == 0;
      *all += in;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      *huge += aligned && strstr(line, " hg") != NULL;
    }
  }
  fclose(f);
}

static void huge_pages(void) {
  int all, huge;
  big_tables(&all, &huge);
  CHECK(all == 1, "%d mappings of 8 MiB after two inits, not 1 (the first one's not unmapped?)", all);
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0)
    CHECK(huge == 1, "the big table is not on a 2 MiB boundary with MADV_HUGEPAGE");
}

static long mapped_bytes(void) {
  long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL || fscanf(f, "%ld", &pages) != 1)
    pages = -1;
  if (f != NULL)
    fclose(f);
  return pages * sysconf(_SC_PAGESIZE);
}

/* Interns n fresh ids (past the first table's cap when n > 2^14): each NEW
 * once, KNOWN after. */
static void intern_fresh(uint32_t n, const char *what) {
  for (uint32_t i = 0; i < n; i++) {
    ids[i] = rnd() | 1;
    enum hs_intern in = hs_stacks_intern(ids[i]);
    CHECK(in == HS_STACK_NEW, "%s: id %u gives %d, not NEW", what, i, (int)in);
  }
  for (uint32_t i = 0; i < n; i++)
    CHECK(hs_stacks_intern(ids[i]) == HS_STACK_KNOWN, "%s: id %u not KNOWN", what, i);
}

static void little_address_space(void) {
  struct rlimit old;
  long now = mapped_bytes();
  CHECK(now > 0 && getrlimit(RLIMIT_AS, &old) == 0, "cannot read the address space");
  if (now <= 0)
    return;
  /* Room for the tables (8.25 MiB, those of before unmapped first) and 1
   * MiB more: not for the aligned mapping's 2 MiB of slack. */
  struct rlimit lim = {(rlim_t)now + (1 << 20), old.rlim_max};
  CHECK(setrlimit(RLIMIT_AS, &lim) == 0, "setrlimit");
  CHECK(hs_stacks_init() == HS_OK, "no room for the aligned table: init failed");
  intern_fresh(20000, "unaligned table");
  /* No room for the big table at all. */
  lim.rlim_cur = (rlim_t)now - (2 << 20);
  CHECK(setrlimit(RLIMIT_AS, &lim) == 0, "setrlimit");
  CHECK(hs_stacks_init() == -HS_ERR_OUT_OF_MEMORY, "no room for the table: init did not fail");
  CHECK(hs_stacks_intern(ids[0]) == HS_STACK_FULL, "no table: not FULL");
  CHECK(hs_stacks_intern(ids[0]) == HS_STACK_FULL, "no table: not FULL the second time");
  CHECK(setrlimit(RLIMIT_AS, &old) == 0, "setrlimit back");
  CHECK(hs_stacks_init() == HS_OK, "init failed once there was room again");
  intern_fresh(20000, "room again");
}

int main(void) {
  one_frame_changes();
  empty_stack();
  intern_set();
  huge_pages();
  little_address_space();
  return check_status();
}
