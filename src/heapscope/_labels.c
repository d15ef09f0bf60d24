/*
 * heapscope._labels: the one call a `with heapscope.label(...)` block makes into the
 * client (labels.py, docs/labels.md), as a direct C call instead of ctypes: ctypes
 * spent about 1.5 us a call converting arguments, which a request of tens of
 * microseconds notices.
 *
 *   bind(ctx, text, count) -> int   heapscope_label_bind_v1(ctx, text, len(text), count):
 *                                   the context bound (0: none, or not profiled)
 *   found() -> bool                 whether a bind so far has found the client (no lookup)
 *
 * The client is looked for with dlsym(RTLD_DEFAULT) at the first call, and again every
 * 4096 calls while it is not found (as include/heapscope.h does), so that a client
 * `heapscope record -p` attached since is found. When found it is told where a thread
 * state keeps its current context: offsetof(PyThreadState, context), known here at
 * compile time for the Python this module is built for. Every call holds the GIL, so
 * the module's own state needs no atomics.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

typedef uintptr_t (*bind_fn)(uintptr_t ctx, const char *pairs, uint32_t len, uint32_t count);
typedef int (*python_fn)(void *get_tstate, void *initialized, uint32_t offset);

static bind_fn client_bind;   /* NULL: not found (yet) */
static unsigned long misses;  /* calls while not found; a lookup at every 4096th */

/* Looks for the client's functions; sets client_bind only once the client knows where
 * a thread state keeps its context (before that it cannot bind ctx 0). */
static void lookup(void) {
  void *b = dlsym(RTLD_DEFAULT, "heapscope_label_bind_v1");
  void *p = dlsym(RTLD_DEFAULT, "heapscope_label_python_v1");
  if (b == NULL || p == NULL)
    return;
  python_fn python;
  memcpy(&python, &p, sizeof python);
  /* Function pointers passed as data, as the client's interface takes them. */
  PyThreadState *(*getter)(void) = PyGILState_GetThisThreadState;
  int (*initialized)(void) = Py_IsInitialized;
  void *g, *i;
  memcpy(&g, &getter, sizeof g);
  memcpy(&i, &initialized, sizeof i);
  if (python(g, i, (uint32_t)offsetof(PyThreadState, context)) == 0)
    memcpy(&client_bind, &b, sizeof client_bind);
}

static inline bind_fn the_client(void) {
  if (client_bind == NULL && misses++ % 4096 == 0)
    lookup();
  return client_bind;
}

static PyObject *labels_bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 3 || !PyBytes_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "bind(ctx: int, text: bytes, count: int)");
    return NULL;
  }
  bind_fn fn = the_client();
  if (fn == NULL)
    return PyLong_FromLong(0);
  size_t ctx = PyLong_AsSize_t(args[0]);
  unsigned long count = PyLong_AsUnsignedLong(args[2]);
  if (PyErr_Occurred())
    return NULL;
  Py_ssize_t len = PyBytes_GET_SIZE(args[1]);
  if (len > UINT32_MAX || count > UINT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "bind: a label text too long");
    return NULL;
  }
  uintptr_t got = fn((uintptr_t)ctx, PyBytes_AS_STRING(args[1]), (uint32_t)len, (uint32_t)count);
  return PyLong_FromSize_t((size_t)got);
}

static PyObject *labels_found(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(client_bind != NULL);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))labels_bind, METH_FASTCALL,
     "bind(ctx, text, count) -> the context bound by the client (0: none, or not profiled)"},
    {"found", labels_found, METH_NOARGS, "found() -> whether a bind so far has found the client"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "heapscope._labels", "Allocation labels' call into the client.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__labels(void) { return PyModule_Create(&module); }
