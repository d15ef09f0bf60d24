/*
 * heapscope.store._callsites: the callsite table's rows checked and made a dict in one C
 * loop (store/tree.py plain_callsites). A compiler build has ~450k callsites; checking each
 * row in Python bytecode was a tenth of every command that reads stacks.
 *
 *   plain_rows(rows) -> (callsites, deepest) | None
 *
 * `rows`: a list of (id, parent id or None, frame id) by id, as fetched. When every row is as
 * `record` writes them (integers, each parent's id below its child's), the dict
 * {id: (parent, frame)} and the depth of the deepest chain (a parent not among the rows is a
 * root, depth 0); None when some row is not, for the checked conversions to read them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* id -> depth: by id when the ids are dense (`record` numbers them from 1: one array, no
 * hashing), else open addressing with a capacity a power of two at least twice the rows. */
typedef struct {
  int64_t *keys;
  Py_ssize_t *depth;  /* -1: empty slot (or no such id) */
  size_t mask;
  int64_t dense;      /* > 0: depth[id] for ids in [0, dense) */
} Depths;

static inline size_t slot_of(int64_t key, size_t mask) {
  uint64_t k = (uint64_t)key;
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k & mask;
}

static Py_ssize_t *depth_slot(Depths *d, int64_t key) {
  if (d->dense > 0)
    return &d->depth[key];  /* add_rows checked every id (and parent: below its child) is in range */
  size_t i = slot_of(key, d->mask);
  while (d->depth[i] >= 0 && d->keys[i] != key)
    i = (i + 1) & d->mask;
  d->keys[i] = key;  /* an empty slot is told by its depth: a lookup that misses changes nothing */
  return &d->depth[i];
}

/* A row's value as an int64 when it is an int (not a bool, not text): 0, else -1. */
static int plain_int(PyObject *o, int64_t *out) {
  if (!PyLong_CheckExact(o))
    return -1;
  int overflow;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return -1;
  }
  *out = v;
  return 0;
}

/* Adds the rows to `out`, the deepest chain's depth to `deepest` (-1: no rows); 0, else 1: a
 * row not plain, 2: an id out of the dense range, -1: an error. */
static int add_rows(PyObject *rows, PyObject *out, Depths *d, Py_ssize_t *deepest) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
    PyObject *row = PyList_GET_ITEM(rows, i);
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3)
      return 1;
    PyObject *cs = PyTuple_GET_ITEM(row, 0), *parent = PyTuple_GET_ITEM(row, 1), *frame = PyTuple_GET_ITEM(row, 2);
    int64_t id, parent_id = 0, frame_id;
    if (plain_int(cs, &id) < 0 || plain_int(frame, &frame_id) < 0)
      return 1;
    if (d->dense > 0 && (id < 0 || id >= d->dense))
      return 2;
    Py_ssize_t depth = 0;
    if (parent != Py_None) {
      if (plain_int(parent, &parent_id) < 0 || parent_id >= id)
        return 1;
      if (d->dense > 0 && parent_id < 0)
        return 2;
      Py_ssize_t above = *depth_slot(d, parent_id);
      depth = above >= 0 ? above + 1 : 0;
    }
    *depth_slot(d, id) = depth;
    if (depth > *deepest)
      *deepest = depth;
    PyObject *entry = PyTuple_Pack(2, parent, frame);
    if (entry == NULL)
      return -1;
    int rc = PyDict_SetItem(out, cs, entry);
    Py_DECREF(entry);
    if (rc < 0)
      return -1;
  }
  return 0;
}

/* plain_rows() with ids by index (`dense`, when the last id allows) or hashed; sets `again`
 * when an id was out of the dense range after all, for the hashed one. */
static PyObject *rows_read(PyObject *rows, int dense, int *again) {
  Py_ssize_t n = PyList_GET_SIZE(rows);
  size_t cap = 16;
  while (cap < 2 * (size_t)n + 2)
    cap *= 2;
  /* Dense ids when the last row's (the largest, rows being by id) is below a few times the rows. */
  int64_t last = -1;
  PyObject *tail = n > 0 ? PyList_GET_ITEM(rows, n - 1) : NULL;
  if (dense && tail != NULL && PyTuple_Check(tail) && PyTuple_GET_SIZE(tail) == 3 &&
      plain_int(PyTuple_GET_ITEM(tail, 0), &last) == 0 && last >= 0 && last < 4 * (int64_t)n + 1024)
    cap = (size_t)last + 1;
  else
    last = -1;
  Depths d = {last >= 0 ? NULL : PyMem_Malloc(cap * sizeof(int64_t)), PyMem_Malloc(cap * sizeof(Py_ssize_t)),
              cap - 1, last + 1};
  PyObject *out = PyDict_New(), *result = NULL;
  if ((d.keys == NULL && d.dense == 0) || d.depth == NULL || out == NULL) {
    if (out != NULL)
      PyErr_NoMemory();
    goto done;
  }
  memset(d.depth, 0xff, cap * sizeof(Py_ssize_t));
  Py_ssize_t deepest = -1;
  int rc = add_rows(rows, out, &d, &deepest);
  *again = rc == 2;
  if (rc == 1)
    result = Py_NewRef(Py_None);
  else if (rc == 0)
    result = Py_BuildValue("(On)", out, deepest);
done:
  PyMem_Free(d.keys);
  PyMem_Free(d.depth);
  Py_XDECREF(out);
  return result;
}

static PyObject *plain_rows(PyObject *self, PyObject *rows) {
  (void)self;
  if (!PyList_Check(rows)) {
    PyErr_SetString(PyExc_TypeError, "plain_rows() takes the list of rows");
    return NULL;
  }
  int again = 0;
  PyObject *got = rows_read(rows, 1, &again);
  return again ? rows_read(rows, 0, &again) : got;
}

static PyMethodDef methods[] = {
    {"plain_rows", plain_rows, METH_O, "plain_rows(rows) -> ({id: (parent, frame)}, deepest) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "heapscope.store._callsites", "The callsite table's rows checked in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__callsites(void) { return PyModule_Create(&module); }
