/*
 * heapscope._labels: the one call a `with heapscope.label(...)` block makes into the
 * client (labels.py, docs/labels.md), as a direct C call instead of ctypes: ctypes
 * spent about 1.5 us a call converting arguments, which a request of tens of
 * microseconds notices.
 *
 *   bind(ctx, text, count) -> int   heapscope_label_bind_v1(ctx, text, len(text), count):
 *                                   the context bound (0: none, or not profiled)
 *   found() -> bool                 whether a bind so far has found the client (no lookup)
 *   Block                           `with heapscope.label(...)`'s construction, enter and
 *                                   exit (below)
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

/* ---- Block: `with heapscope.label(...)` in C ----
 *
 * The Python side (labels.py) keeps what is done once per distinct label set: checking
 * pairs, merging a block's pairs into the outer set, the sets' texts. What a request pays
 * each time, construction, enter and exit, is here: in Python they cost ~3 us a block
 * (the with protocol of a Python class alone ~0.85 us), several percent of a small
 * server's request. setup() hands over the ContextVar of the labels in force, the cache of
 * checked pairs and the two Python functions for a miss. */

static PyObject *current_var; /* ContextVar[_Set] */
static PyObject *checked;     /* dict: tuple(kwargs.items()) -> checked pairs */
static PyObject *check_fn;    /* labels._checked_pairs(items) -> pairs (caches them) */
static PyObject *set_of_fn;   /* labels._set_of(outer, pairs) -> _Set (caches it) */
static PyObject *str_inner, *str_text, *str_count;

typedef struct {
  PyObject_HEAD
  PyObject *kv;      /* the block's checked pairs */
  PyObject *entered; /* list of (token, ctx, outer): one per enter not yet exited */
} Block;

static void block_dealloc(Block *self) {
  Py_XDECREF(self->kv);
  Py_XDECREF(self->entered);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *block_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  if (current_var == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "heapscope._labels: setup() not called");
    return NULL;
  }
  if (PyTuple_GET_SIZE(args) != 0) {
    PyErr_SetString(PyExc_TypeError, "heapscope.label takes key=value arguments only");
    return NULL;
  }
  Py_ssize_t n = kwargs ? PyDict_GET_SIZE(kwargs) : 0, pos = 0, i = 0;
  PyObject *items = PyTuple_New(n), *k, *v;
  if (items == NULL) return NULL;
  while (kwargs && PyDict_Next(kwargs, &pos, &k, &v)) {
    PyObject *pair = PyTuple_Pack(2, k, v);
    if (pair == NULL) {
      Py_DECREF(items);
      return NULL;
    }
    PyTuple_SET_ITEM(items, i++, pair);
  }
  PyObject *kv = PyDict_GetItemWithError(checked, items); /* borrowed */
  if (kv != NULL) {
    Py_INCREF(kv);
  } else {
    PyErr_Clear(); /* a value that is not hashable: checked each time */
    kv = PyObject_CallFunctionObjArgs(check_fn, items, NULL);
  }
  Py_DECREF(items);
  if (kv == NULL) return NULL;
  Block *self = (Block *)type->tp_alloc(type, 0);
  if (self == NULL) {
    Py_DECREF(kv);
    return NULL;
  }
  self->kv = kv;
  self->entered = NULL;
  return (PyObject *)self;
}

/* heapscope_label_bind_v1 with a set's text and count; 0 when not profiled. */
static int bind_set(uintptr_t ctx, PyObject *set, uintptr_t *out) {
  *out = 0;
  bind_fn fn = the_client();
  if (fn == NULL) return 0;
  PyObject *text = PyObject_GetAttr(set, str_text);
  if (text == NULL) return -1;
  PyObject *count = PyObject_GetAttr(set, str_count);
  if (count == NULL || !PyBytes_Check(text)) {
    Py_DECREF(text);
    Py_XDECREF(count);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a label set's text is bytes");
    return -1;
  }
  unsigned long c = PyLong_AsUnsignedLong(count);
  Py_DECREF(count);
  if (c == (unsigned long)-1 && PyErr_Occurred()) {
    Py_DECREF(text);
    return -1;
  }
  Py_ssize_t len = PyBytes_GET_SIZE(text);
  if (len <= UINT32_MAX && c <= UINT32_MAX)
    *out = fn(ctx, PyBytes_AS_STRING(text), (uint32_t)len, (uint32_t)c);
  Py_DECREF(text);
  return 0;
}

static PyObject *block_enter(Block *self, PyObject *unused) {
  (void)unused;
  PyObject *outer = NULL, *inner = NULL, *labels = NULL, *token = NULL, *entry = NULL, *ctxobj = NULL;
  if (PyContextVar_Get(current_var, NULL, &outer) < 0 || outer == NULL) goto fail;
  inner = PyObject_GetAttr(outer, str_inner);
  if (inner == NULL || !PyDict_Check(inner)) goto fail;
  labels = PyDict_GetItemWithError(inner, self->kv);
  if (labels != NULL) {
    Py_INCREF(labels);
  } else {
    if (PyErr_Occurred()) goto fail;
    labels = PyObject_CallFunctionObjArgs(set_of_fn, outer, self->kv, NULL);
    if (labels == NULL) goto fail;
  }
  token = PyContextVar_Set(current_var, labels); /* first: it makes the thread's context if it had none */
  if (token == NULL) goto fail;
  uintptr_t ctx;
  if (bind_set(0, labels, &ctx) < 0) goto fail; /* the context this block runs in (0: not profiled) */
  ctxobj = PyLong_FromSize_t((size_t)ctx);
  if (ctxobj == NULL) goto fail;
  entry = PyTuple_Pack(3, token, ctxobj, outer);
  if (entry == NULL) goto fail;
  if (self->entered == NULL && (self->entered = PyList_New(0)) == NULL) goto fail;
  if (PyList_Append(self->entered, entry) < 0) goto fail;
  Py_DECREF(entry);
  Py_DECREF(ctxobj);
  Py_DECREF(token);
  Py_DECREF(labels);
  Py_DECREF(inner);
  Py_DECREF(outer);
  Py_INCREF(self);
  return (PyObject *)self;
fail:
  if (token != NULL && entry == NULL) { /* set but not recorded: undone */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyContextVar_Reset(current_var, token) < 0) PyErr_Clear();
    PyErr_Restore(et, ev, tb);
  }
  Py_XDECREF(entry);
  Py_XDECREF(ctxobj);
  Py_XDECREF(token);
  Py_XDECREF(labels);
  Py_XDECREF(inner);
  Py_XDECREF(outer);
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "heapscope.label: labels in force unreadable");
  return NULL;
}

static PyObject *block_exit(Block *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)args;
  (void)nargs;
  Py_ssize_t n = self->entered ? PyList_GET_SIZE(self->entered) : 0;
  if (n == 0) {
    PyErr_SetString(PyExc_RuntimeError, "heapscope.label: exit without enter");
    return NULL;
  }
  PyObject *entry = PyList_GET_ITEM(self->entered, n - 1);
  Py_INCREF(entry);
  if (PyList_SetSlice(self->entered, n - 1, n, NULL) < 0) {
    Py_DECREF(entry);
    return NULL;
  }
  PyObject *token = PyTuple_GET_ITEM(entry, 0), *ctxobj = PyTuple_GET_ITEM(entry, 1);
  PyObject *outer = PyTuple_GET_ITEM(entry, 2);
  int rc = PyContextVar_Reset(current_var, token);
  size_t ctx = rc < 0 ? 0 : PyLong_AsSize_t(ctxobj);
  uintptr_t ignored;
  if (rc == 0 && ctx != 0 && !PyErr_Occurred())
    rc = bind_set((uintptr_t)ctx, outer, &ignored); /* the outer block's set again, or none */
  Py_DECREF(entry);
  if (rc < 0 || PyErr_Occurred()) return NULL;
  Py_RETURN_FALSE;
}

static PyObject *block_pairs(Block *self, void *closure) {
  (void)closure;
  Py_INCREF(self->kv);
  return self->kv;
}

static PyMethodDef block_methods[] = {
    {"__enter__", (PyCFunction)block_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))block_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyObject *block_entered(Block *self, void *closure) {
  (void)closure;
  if (self->entered == NULL) return PyList_New(0);
  Py_INCREF(self->entered);
  return self->entered;
}

static PyGetSetDef block_getset[] = {
    {"_kv", (getter)block_pairs, NULL, "the block's checked pairs", NULL},
    {"_entered", (getter)block_entered, NULL, "(token, context bound, outer set) of each enter not exited", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "heapscope._labels.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A label block's construction, enter and exit (labels.py's label derives from it).",
    .tp_methods = block_methods,
    .tp_getset = block_getset,
    .tp_new = block_new,
};

static PyObject *labels_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 4 || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "setup(current, checked: dict, check, set_of)");
    return NULL;
  }
  PyObject **slots[4] = {&current_var, &checked, &check_fn, &set_of_fn};
  for (int i = 0; i < 4; i++) {
    Py_INCREF(args[i]);
    Py_XSETREF(*slots[i], args[i]);
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))labels_bind, METH_FASTCALL,
     "bind(ctx, text, count) -> the context bound by the client (0: none, or not profiled)"},
    {"found", labels_found, METH_NOARGS, "found() -> whether a bind so far has found the client"},
    {"setup", (PyCFunction)(void (*)(void))labels_setup, METH_FASTCALL,
     "setup(current, checked, check, set_of): what Block reads and calls (labels.py)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "heapscope._labels", "Allocation labels' call into the client.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__labels(void) {
  str_inner = PyUnicode_InternFromString("inner");
  str_text = PyUnicode_InternFromString("text");
  str_count = PyUnicode_InternFromString("count");
  if (str_inner == NULL || str_text == NULL || str_count == NULL || PyType_Ready(&BlockType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  Py_INCREF(&BlockType);
  if (PyModule_AddObject(m, "Block", (PyObject *)&BlockType) < 0) {
    Py_DECREF(&BlockType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
