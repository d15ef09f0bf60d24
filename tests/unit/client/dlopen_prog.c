/* Loads argv[1] after startup and allocates from it, so the client must
 * find the new object (a module rescan) to describe those stacks. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return 3;
  void *(*alloc)(size_t) = (void *(*)(size_t))dlsym(h, "plugin_alloc");
  if (!alloc)
    return 4;
  for (int i = 0; i < 100; i++)
    free(alloc(31000 + i));
  puts("plugin done");
  return 0;
}
