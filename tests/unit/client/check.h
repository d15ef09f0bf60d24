/* check.h: what the C unit test drivers of this folder share: CHECK (one
 * line per failed check, counted in `failures`), the exit status from it, and
 * a fixed-seed xorshift generator, so every run tests the same values. */
#ifndef HS_TEST_CHECK_H
#define HS_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      failures++;                                 \
    }                                             \
  } while (0)

static uint64_t test_rng = 88172645463325252ull;
static inline uint64_t rnd(void) {
  test_rng ^= test_rng << 13;
  test_rng ^= test_rng >> 7;
  test_rng ^= test_rng << 17;
  return test_rng;
}

/* main's return value: 0 when every check held. */
static inline int check_status(void) {
  if (failures)
    printf("%d failures\n", failures);
  return failures != 0;
}

#endif
