/* record_stacks.c: a few thousand small allocations from a few hundred distinct stacks,
 * then exit 3: a profile of a few hundred KiB, for the disk-full tests of `heapscope
 * record` (tests/fault/test_record_faults.py). */
#include <stdlib.h>

#define F(i)                                                                                       \
  __attribute__((noinline)) void *f##i(size_t n) {                                                 \
    void *p = malloc(n);                                                                           \
    __asm__ volatile("" ::: "memory");                                                             \
    return p;                                                                                      \
  }
F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)
typedef void *(*fn)(size_t);
static fn fs[8] = {f0, f1, f2, f3, f4, f5, f6, f7};
void *kept[32000]; /* global: the compiler must keep every store */
static int nkept;

__attribute__((noinline)) static void down(int d, int code) {
  if (d == 0) {
    for (int i = 0; i < 8 && nkept < 32000; i++)
      kept[nkept++] = fs[(code >> (3 * i)) & 7](64);
    return;
  }
  down(d - 1, code);
}

int main(void) {
  for (int c = 0; c < 4000; c++)
    down(1 + c % 4, c);
  return 3;
}
