/* reload.c: a plugin host that unloads one library and loads another where it was.
 *
 * Built as a program (build.py), it is the host; built with -DPLUGIN=NAME
 * -shared -fPIC, it is a plugin whose one function NAME_alloc allocates
 * PLUGIN_BLOCKS blocks of PLUGIN_BLOCK bytes and keeps them. Plugins of names
 * of one length have the same size and layout: the loader maps the second
 * where the first was, once that one is unloaded and nothing else was mapped
 * meanwhile.
 *
 * Host usage: reload [--libc-dlclose] FIRST.so NAME1 SECOND.so NAME2 [COPY_TO]
 *   dlopen FIRST, call NAME1_alloc, dlclose it; dlopen SECOND, call NAME2_alloc.
 *   With COPY_TO, each library is copied to that one path and loaded from it (a
 *   plugin rebuilt on disk between its loads: one path, two build ids).
 *   Both calls go through one call site (run), as a host calls its plugins.
 *   With --libc-dlclose, the C library's dlclose is called (found in libc.so.6, not
 *   through the global scope: a profiler's dlclose is not called, as for a profiler
 *   attached later), and the second call goes through another function (run_again).
 *   Prints "base NAME 0x..." for each load (dladdr of its function), then exits 0.
 *
 * Ground truth (tests/integration/test_reload.py builds the plugins alpha and bravo):
 *   path                          alloc_space  alloc_objects  space    objects
 *   main > ... > alpha_alloc        4194304         64       4194304     64
 *   main > ... > bravo_alloc        4194304         64       4194304     64
 *       64 x malloc(64 KiB) each, all kept
 * `--print-truth` prints these lines and exits without allocating.
 */
#define PLUGIN_BLOCKS 64
#define PLUGIN_BLOCK (64 * 1024) /* below glibc's mmap threshold: nothing mapped between the loads */

#ifdef PLUGIN
#include <stdlib.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

static void *kept[PLUGIN_BLOCKS];

void CAT(PLUGIN, _alloc)(void) {
  for (int i = 0; i < PLUGIN_BLOCKS; i++) {
    kept[i] = malloc(PLUGIN_BLOCK);
    if (kept[i])
      memset(kept[i], 1, PLUGIN_BLOCK);
  }
}
#else
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "truth.h"

/* Copies src over dst through a new file renamed into place (the old one may still be
 * mapped); a stack buffer, so that nothing is allocated between the loads. */
static int copy_file(const char *src, const char *dst) {
  char tmp[4096], buf[8192];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", dst) >= (int)sizeof tmp)
    return -1;
  int in = open(src, O_RDONLY | O_CLOEXEC);
  int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  if (in < 0 || out < 0)
    return -1;
  ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, (size_t)n) != n)
      return -1;
  close(in);
  if (close(out) != 0 || n < 0)
    return -1;
  return rename(tmp, dst);
}

__attribute__((noinline)) static void run(void (*fn)(void)) { fn(); }
__attribute__((noinline)) static void run_again(void (*fn)(void)) { fn(); }

static int (*close_fn)(void *);

/* Loads `path`, calls NAME_alloc, prints where it was loaded, unloads it when `unload`. */
static int load_and_call(const char *path, const char *name, int unload, void (*call)(void (*)(void))) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return -1;
  }
  char sym[256];
  snprintf(sym, sizeof sym, "%s_alloc", name);
  void (*fn)(void) = (void (*)(void))dlsym(h, sym);
  Dl_info info;
  if (!fn || !dladdr((void *)fn, &info)) {
    fprintf(stderr, "no %s in %s\n", sym, path);
    return -1;
  }
  call(fn);
  printf("base %s %p\n", name, info.dli_fbase);
  fflush(stdout);
  if (unload && (close_fn ? close_fn(h) : dlclose(h)) != 0) {
    fprintf(stderr, "dlclose %s: %s\n", path, dlerror());
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    long long bytes = (long long)PLUGIN_BLOCKS * PLUGIN_BLOCK;
    truth_line("alpha_alloc", bytes, PLUGIN_BLOCKS, bytes, PLUGIN_BLOCKS);
    truth_line("bravo_alloc", bytes, PLUGIN_BLOCKS, bytes, PLUGIN_BLOCKS);
    return 0;
  }
  int libc_close = argc > 1 && strcmp(argv[1], "--libc-dlclose") == 0;
  if (libc_close) {
    /* libc.so.6 since glibc 2.34, libdl.so.2 before */
    const char *libs[] = {"libc.so.6", "libdl.so.2"};
    for (int i = 0; i < 2 && !close_fn; i++) {
      void *lib = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
      close_fn = lib ? (int (*)(void *))dlsym(lib, "dlclose") : NULL;
    }
    if (!close_fn) {
      fprintf(stderr, "no dlclose in libc.so.6 or libdl.so.2\n");
      return 1;
    }
    argc--;
    argv++;
  }
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s [--libc-dlclose] FIRST.so NAME1 SECOND.so NAME2 [COPY_TO]\n", argv[0]);
    return 2;
  }
  const char *copy_to = argc == 6 ? argv[5] : NULL;
  for (int i = 0; i < 2; i++) {
    const char *path = argv[1 + 2 * i], *name = argv[2 + 2 * i];
    if (copy_to) {
      if (copy_file(path, copy_to) != 0) {
        perror("copy");
        return 1;
      }
      path = copy_to;
    }
    if (load_and_call(path, name, i == 0, i == 1 && libc_close ? run_again : run) != 0)
      return 1;
  }
  return 0;
}
#endif
