/* A shared object that dlopen_prog.c loads after startup; it allocates. */
#include <stdlib.h>

void *volatile plugin_sink;

__attribute__((noinline)) void *plugin_alloc(size_t n) {
  void *p = malloc(n);
  plugin_sink = p;
  return p;
}
