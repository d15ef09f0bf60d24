/* Unit test driver for client/stacks.c's stack ids, built and run by
 * test_stacks.py. The id is a hash of (depth, pcs) in four lanes (stacks.c):
 * equal stacks give equal ids; two stacks of one depth that differ in one
 * frame never collide, at every depth (a tail of 0 to 3 frames past the
 * last full round of lanes included) and at every position; stacks that
 * differ only in depth, or only by two frames swapped between lanes, differ
 * too. Prints one line per failed check and exits non-zero on any failure. */
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

int main(void) {
  one_frame_changes();
  empty_stack();
  return check_status();
}
