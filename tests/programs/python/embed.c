/*
 * embed.c: a C program that loads a shared libpython after it started and
 * runs Python in it (an embedded interpreter; tests/integration/test_python_embed.py).
 *
 *   embed LIBPYTHON SCRIPT
 *
 * Before loading anything it mallocs a block of its own (so that the
 * client's first look finds no CPython), then dlopen()s LIBPYTHON with
 * RTLD_GLOBAL, runs Py_InitializeEx(0) and executes SCRIPT as a file (its
 * frames carry its path and lines). The script ends the process itself.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*init_fn)(int);
typedef int (*run_fn)(const char *);

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: embed LIBPYTHON SCRIPT\n");
    return 2;
  }
  volatile char *before = malloc(4096);
  before[0] = 1;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "embed: %s\n", dlerror());
    return 3;
  }
  init_fn init = (init_fn)dlsym(lib, "Py_InitializeEx");
  run_fn run = (run_fn)dlsym(lib, "PyRun_SimpleString");
  if (!init || !run) {
    fprintf(stderr, "embed: no Py_InitializeEx or PyRun_SimpleString\n");
    return 3;
  }
  init(0);
  char code[8192];
  snprintf(code, sizeof code,
           "import sys\nsys.argv = [r'''%s''']\npath = sys.argv[0]\n"
           "exec(compile(open(path).read(), path, 'exec'), {'__name__': '__main__'})\n",
           argv[2]);
  int rc = run(code);
  return rc == 0 ? 0 : 4;
}
