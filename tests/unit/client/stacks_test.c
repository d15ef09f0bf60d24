/* Unit test driver for client/stacks.c's stack ids, built and run by
 * test_stacks.py. The id is a hash of (depth, pcs) in four lanes (stacks.c):
 * equal stacks give equal ids; two stacks of one depth that differ in one
 * frame never collide, at every depth (a tail of 0 to 3 frames past the
 * last full round of lanes included) and at every position; stacks that
 * differ only in depth, or only by two frames swapped between lanes, differ
 * too. The set (hs_stacks_intern): every id is NEW once and KNOWN after,
 * past the first table's cap (2^14 ids, stacks.h) and into the big table,
 * with ids that share a home slot in either table. Prints one line per
 * failed check and exits non-zero on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

int main(void) {
  one_frame_changes();
  empty_stack();
  intern_set();
  return check_status();
}
