/* cfa_lib.c: a shared object for cfa_test.c's unload check, built twice by
 * test_cfa.py with different FRAME sizes: the code keeps the same layout
 * (so the same return addresses when the second is loaded where the first
 * was), but the CFA offsets differ. */
typedef void (*cfa_lib_cb)(void);

#ifndef FRAME
#define FRAME 32
#endif

__attribute__((noinline)) static int level(cfa_lib_cb cb, int depth) {
  volatile char pad[FRAME];
  pad[0] = (char)depth;
  if (depth == 0)
    cb();
  else
    level(cb, depth - 1);
  return pad[0];
}

int cfa_lib_call(cfa_lib_cb cb) {
  return level(cb, 3);
}
