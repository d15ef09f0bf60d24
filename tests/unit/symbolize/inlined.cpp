#include <cstdio>
#include <cstdlib>
namespace app {
static inline __attribute__((always_inline)) void *inner_alloc(unsigned long n) { return std::malloc(n + 1); }
static inline __attribute__((always_inline)) void *middle_alloc(unsigned long n) { return inner_alloc(n * 2); }
__attribute__((noinline)) void *outer_fn(unsigned long n) {
  void *p = middle_alloc(n);
  asm volatile("" ::: "memory");
  return p;
}
}  // namespace app
int main(int argc, char **) {
  void *p = app::outer_fn(100 + static_cast<unsigned long>(argc));
  std::printf("%d\n", p != nullptr);
  std::free(p);
  return 0;
}
