/*
 * An embedding host for test_pyframes.py: dlopen()s libpython RTLD_LOCAL
 * (so its symbols are not in the global scope), asks the preloaded probe to
 * detect CPython again (it found none at start-up), then runs Python code
 * that allocates. The probe's malloc() must find and walk its frames.
 *
 *   pyframes_embed /path/to/libpython3.X.so
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  int (*detect)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "probe_detect");
  if (detect == NULL) return 3;
  printf("before %d\n", detect());
  void *py = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (py == NULL) {
    printf("dlopen: %s\n", dlerror());
    return 4;
  }
  if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL) return 5; /* must be local */
  void (*init)(int) = (void (*)(int))dlsym(py, "Py_InitializeEx");
  int (*run)(const char *) = (int (*)(const char *))dlsym(py, "PyRun_SimpleString");
  int (*fini)(void) = (int (*)(void))dlsym(py, "Py_FinalizeEx");
  if (init == NULL || run == NULL || fini == NULL) return 6;
  init(0);
  printf("after %d\n", detect());
  int rc = run("def embedded_work(n):\n"
               "    return sum(len(str(i) * 400) for i in range(n))\n"
               "print('sum', embedded_work(20000))\n");
  fflush(stdout);
  return rc != 0 || fini() != 0;
}
