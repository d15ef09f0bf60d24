/* Shared helpers for heapscope's test target programs.
 *
 * Every program states its ground truth twice: in the comment at the top of its
 * source (for the reader) and through `--print-truth` (for the tests), computed
 * from the same constants the program allocates with. `--print-truth` prints and
 * exits before any allocation, so running it unprofiled costs nothing.
 *
 * One line per call path, whitespace separated:
 *     truth <function> <alloc_space> <alloc_objects> <space> <objects>
 * <function> is a function name that appears in the path's stack and in no other
 * allocating path of the program. The four numbers are the heapprofd views at the
 * end of the program at sampling interval 1: bytes ever allocated, allocations
 * ever made, bytes still allocated at exit, allocations still live at exit.
 */
#ifndef HEAPSCOPE_TEST_TRUTH_H
#define HEAPSCOPE_TEST_TRUTH_H

#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline void truth_line(const char *fn, long long alloc_space, long long alloc_objects,
                              long long space, long long objects) {
  printf("truth %s %lld %lld %lld %lld\n", fn, alloc_space, alloc_objects, space, objects);
}

static inline int wants_truth(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--print-truth") == 0) return 1;
  return 0;
}

/* The pointer stores below go through this so -O0 cannot drop an allocation
 * and the compiler does not complain about unused results. */
static void *volatile truth_sink;

#ifdef __cplusplus
}
#endif

#endif
