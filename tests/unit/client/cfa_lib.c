/* cfa_lib.c: a shared object for cfa_test.c's unload check, built twice by
 * test_cfa.py with different FRAME sizes: the code keeps the same layout
 * (so the same return addresses when the second is loaded where the first
 * was), but the CFA offsets differ; and a third time with another layout. */
typedef void (*cfa_lib_cb)(void);

#ifndef FRAME
#define FRAME 32
#endif

/* Code ahead of the rest: the first two builds have one function of PAD
 * bytes, the third (cfa_test.c's last load) two of PAD and PAD2, together
 * no larger, so that it most likely lands at the same base with one FDE
 * more, its functions elsewhere (and level's FDE still the last). */
#define STR2(x) #x
#define STR(x) STR2(x)
#ifdef PAD
__attribute__((used, noinline)) void cfa_lib_pad(void) {
  __asm__ volatile(".skip " STR(PAD) ", 0x90");
}
#endif
#ifdef PAD2
__attribute__((used, noinline)) void cfa_lib_pad2(void) {
  __asm__ volatile(".skip " STR(PAD2) ", 0x90");
}
#endif

__attribute__((noinline)) static int level(cfa_lib_cb cb, int depth);

/* Ahead of level in the code (test_cfa.py builds with -fno-toplevel-reorder):
 * level's FDE is the object's last. */
int cfa_lib_call(cfa_lib_cb cb) {
  return level(cb, 3);
}

__attribute__((noinline)) static int level(cfa_lib_cb cb, int depth) {
  volatile char pad[FRAME];
  pad[0] = (char)depth;
  if (depth == 0)
    cb();
  else
    level(cb, depth - 1);
  return pad[0];
}
