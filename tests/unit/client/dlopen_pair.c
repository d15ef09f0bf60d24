/* Loads argv[1] and allocates from it (the client finds it by a module
 * rescan), then at once loads argv[2] and allocates from it 1000 times in
 * one stack: within the millisecond in which a second rescan waits
 * (client/modules.c). 20 ms later main allocates 31337 bytes once. The
 * client must send argv[2]'s module before that allocation, not only at the
 * exit's flush (test_client.py). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void *(*alloc_fn)(size_t);
void *volatile pair_sink; /* the compiler may not drop the last malloc/free pair */

static alloc_fn load(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return h ? (alloc_fn)dlsym(h, "plugin_alloc") : NULL;
}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  alloc_fn first = load(argv[1]);
  if (!first)
    return 3;
  free(first(32000));
  alloc_fn second = load(argv[2]);
  if (!second)
    return 4;
  for (int i = 0; i < 1000; i++)
    free(second(33000));
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL);
  pair_sink = malloc(31337);
  free(pair_sink);
  puts("pair done");
  return 0;
}
