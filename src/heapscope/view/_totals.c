/*
 * heapscope.view._paths.function_totals: view/report.py function_rows' walk of every stack,
 * in C (a build's report walks ~450k callsites' paths). Each leaf with a non-zero value is
 * walked to its root: its innermost function gets the value as self, and every function on
 * the path (once, however often it recurses) as total; a function's source line gets it
 * too, for the line a row names. Functions and sources come interned to small ints
 * (`frame_fns` {frame: (function, source or -1, ...)} outermost first, `fns_of(frame)` for
 * a frame not in it); values are summed in 128 bits, so no sum overflows.
 */
#include "_paths.h"

/* Per function (a small int): self and total as 128-bit sums of 64-bit values, so no sum of a
 * profile's values overflows; the stamp of the last path that counted its total, and whether
 * it is in the totals yet (their order is that of first counting, as a dict's). */
typedef struct {
  __int128 *self, *total;
  Py_ssize_t *stamp;
  char *has_self;
  Py_ssize_t *order;  /* functions in the order their totals were first counted */
  Py_ssize_t n_order, cap;
} Totals;

static int totals_fit(Totals *t, Py_ssize_t fn) {
  if (fn < t->cap)
    return 0;
  Py_ssize_t cap = t->cap ? t->cap : 1024;
  while (cap <= fn)
    cap *= 2;
  void *a = PyMem_Realloc(t->self, (size_t)cap * sizeof *t->self);
  if (a != NULL)
    t->self = a;
  void *b = PyMem_Realloc(t->total, (size_t)cap * sizeof *t->total);
  if (b != NULL)
    t->total = b;
  void *c = PyMem_Realloc(t->stamp, (size_t)cap * sizeof *t->stamp);
  if (c != NULL)
    t->stamp = c;
  void *d = PyMem_Realloc(t->has_self, (size_t)cap);
  if (d != NULL)
    t->has_self = d;
  void *e = PyMem_Realloc(t->order, (size_t)cap * sizeof *t->order);
  if (e != NULL)
    t->order = e;
  if (a == NULL || b == NULL || c == NULL || d == NULL || e == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = t->cap; i < cap; i++) {
    t->self[i] = 0;
    t->total[i] = 0;
    t->stamp[i] = -1;
    t->has_self[i] = 0;
  }
  t->cap = cap;
  return 0;
}

static void totals_free(Totals *t) {
  PyMem_Free(t->self);
  PyMem_Free(t->total);
  PyMem_Free(t->stamp);
  PyMem_Free(t->has_self);
  PyMem_Free(t->order);
}

/* A growable array of function ids. */
typedef struct {
  Py_ssize_t *items;
  Py_ssize_t len, cap;
} Ids;

static int ids_push(Ids *a, Py_ssize_t v) {
  if (a->len == a->cap) {
    Py_ssize_t cap = a->cap ? 2 * a->cap : 256;
    Py_ssize_t *items = PyMem_Realloc(a->items, (size_t)cap * sizeof *items);
    if (items == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    a->items = items;
    a->cap = cap;
  }
  a->items[a->len++] = v;
  return 0;
}

/* A Python int as a 128-bit one: a value past 64 bits (an estimate of absurd counts) is
 * split in two halves; OverflowError past 127. */
static int value_of(PyObject *o, __int128 *out) {
  int overflow;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (!overflow) {
    *out = v;
    return v == -1 && PyErr_Occurred() ? -1 : 0;
  }
  PyObject *shift = PyLong_FromLong(64), *mask = PyLong_FromUnsignedLongLong(UINT64_MAX);
  PyObject *hi = NULL, *lo = NULL;
  int rc = -1;
  if (shift != NULL && mask != NULL && (hi = PyNumber_Rshift(o, shift)) != NULL &&
      (lo = PyNumber_And(o, mask)) != NULL) {
    long long h = PyLong_AsLongLongAndOverflow(hi, &overflow);
    unsigned long long l = PyLong_AsUnsignedLongLong(lo);
    if (overflow || h > INT64_MAX / 2 || h < INT64_MIN / 2)
      PyErr_SetString(PyExc_OverflowError, "a value past 126 bits");
    else if (!PyErr_Occurred()) {
      *out = (__int128)((unsigned __int128)h << 64) | (__int128)l;
      rc = 0;
    }
  }
  Py_XDECREF(shift);
  Py_XDECREF(mask);
  Py_XDECREF(hi);
  Py_XDECREF(lo);
  return rc;
}

static PyObject *long_of(__int128 v) {
  if (v >= INT64_MIN && v <= INT64_MAX)
    return PyLong_FromLongLong((long long)v);
  /* hi * 2^64 + lo, for a sum past 64 bits */
  PyObject *hi = PyLong_FromLongLong((long long)(v >> 64)), *lo = PyLong_FromUnsignedLongLong((uint64_t)v);
  PyObject *shift = PyLong_FromLong(64), *out = NULL;
  if (hi != NULL && lo != NULL && shift != NULL) {
    PyObject *up = PyNumber_Lshift(hi, shift);
    if (up != NULL) {
      out = PyNumber_Add(up, lo);
      Py_DECREF(up);
    }
  }
  Py_XDECREF(hi);
  Py_XDECREF(lo);
  Py_XDECREF(shift);
  return out;
}

typedef struct {
  PyObject *callsites, *frame_fns, *fns_of, *python;
  Py_ssize_t no_python;
  Totals t;
  NodeMap where_at;  /* (function, source) -> its index in where_fn/where_src/where_sum */
  Ids where_fn, where_src;
  __int128 *where_sum;
  Py_ssize_t where_cap;
  Ids path, prefix;
  int has_prefix;
} Walk;

static int where_add(Walk *w, Py_ssize_t fn, Py_ssize_t src, __int128 value) {
  if (map_grow(&w->where_at) < 0)
    return -1;
  Py_ssize_t *slot = map_slot(&w->where_at, ((uint64_t)fn << 32) | (uint32_t)src);
  if (*slot < 0) {
    if (w->where_fn.len == w->where_cap) {
      Py_ssize_t cap = w->where_cap ? 2 * w->where_cap : 1024;
      __int128 *sums = PyMem_Realloc(w->where_sum, (size_t)cap * sizeof *sums);
      if (sums == NULL) {
        PyErr_NoMemory();
        return -1;
      }
      w->where_sum = sums;
      w->where_cap = cap;
    }
    if (ids_push(&w->where_fn, fn) < 0 || ids_push(&w->where_src, src) < 0)
      return -1;
    *slot = w->where_fn.len - 1;
    w->where_at.len++;
    w->where_sum[*slot] = 0;
  }
  w->where_sum[*slot] += value;
  return 0;
}

/* Counts function `fn` (source `src`, -1: none) on the path of the leaf `stamp`. */
static int count_fn(Walk *w, Py_ssize_t fn, Py_ssize_t src, __int128 value, Py_ssize_t stamp, int *first) {
  if (totals_fit(&w->t, fn) < 0 || ids_push(&w->path, fn) < 0)
    return -1;
  Totals *t = &w->t;
  if (*first) {
    t->self[fn] += value;
    t->has_self[fn] = 1;
    *first = 0;
  }
  if (t->stamp[fn] == stamp)
    return 0;
  if (t->stamp[fn] < 0)
    t->order[t->n_order++] = fn;
  t->stamp[fn] = stamp;
  t->total[fn] += value;
  return src >= 0 ? where_add(w, fn, src, value) : 0;
}

/* A frame's functions, flat (function, source, ...) outermost first: from `frame_fns`, else
 * from `fns_of(frame)`; a new reference. */
static PyObject *frame_fns_of(Walk *w, PyObject *frame) {
  PyObject *got = PyDict_GetItemWithError(w->frame_fns, frame);
  if (got != NULL) {
    Py_INCREF(got);
    return got;
  }
  if (PyErr_Occurred())
    return NULL;
  got = PyObject_CallOneArg(w->fns_of, frame);
  if (got != NULL && (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) % 2 != 0)) {
    Py_DECREF(got);
    PyErr_SetString(PyExc_TypeError, "fns_of() must return a flat tuple of (function, source) pairs");
    return NULL;
  }
  return got;
}

static int small_id(PyObject *o, Py_ssize_t *out) {
  long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred())
    return -1;
  if (v < -1 || v > (long)INT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "a function or source id out of range");
    return -1;
  }
  *out = v;
  return 0;
}

/* Walks one leaf's path to its root, counting each function's self and total once. */
static int walk_leaf(Walk *w, PyObject *leaf, __int128 value, Py_ssize_t stamp) {
  int first = 1;
  w->path.len = 0;
  PyObject *node = leaf;
  while (node != Py_None) {
    PyObject *entry = PyDict_GetItemWithError(w->callsites, node);
    if (entry == NULL)
      break;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
      PyErr_SetString(PyExc_TypeError, "callsites must map an id to (parent, frame)");
      return -1;
    }
    PyObject *frame = PyTuple_GET_ITEM(entry, 1);
    node = PyTuple_GET_ITEM(entry, 0);
    if (w->python != Py_None) {
      int kept = PySet_Contains(w->python, frame);
      if (kept < 0)
        return -1;
      if (!kept)
        continue;
    }
    PyObject *fns = frame_fns_of(w, frame);
    if (fns == NULL)
      return -1;
    for (Py_ssize_t k = PyTuple_GET_SIZE(fns) - 2; k >= 0; k -= 2) {  /* innermost inlined first */
      Py_ssize_t fn, src;
      if (small_id(PyTuple_GET_ITEM(fns, k), &fn) < 0 || small_id(PyTuple_GET_ITEM(fns, k + 1), &src) < 0 ||
          fn < 0 || count_fn(w, fn, src, value, stamp, &first) < 0) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_ValueError, "a function id out of range");
        Py_DECREF(fns);
        return -1;
      }
    }
    Py_DECREF(fns);
  }
  if (PyErr_Occurred())
    return -1;
  if (w->python != Py_None && first && count_fn(w, w->no_python, -1, value, stamp, &first) < 0)
    return -1;
  /* The prefix of root functions common to every path so far (the path is leaf first). */
  if (!w->has_prefix) {
    w->has_prefix = 1;
    for (Py_ssize_t i = w->path.len - 1; i >= 0; i--)
      if (ids_push(&w->prefix, w->path.items[i]) < 0)
        return -1;
    return 0;
  }
  Py_ssize_t n = 0;
  while (n < w->prefix.len && n < w->path.len && w->prefix.items[n] == w->path.items[w->path.len - 1 - n])
    n++;
  w->prefix.len = n;
  return 0;
}

static PyObject *ids_list(const Ids *a) {
  PyObject *out = PyList_New(a->len);
  for (Py_ssize_t i = 0; out != NULL && i < a->len; i++) {
    PyObject *v = PyLong_FromSsize_t(a->items[i]);
    if (v == NULL)
      Py_CLEAR(out);
    else
      PyList_SET_ITEM(out, i, v);
  }
  return out;
}

/* (self {fn: value}, totals [(fn, value)] in first-counted order, where [(fn, src, value)], prefix). */
static PyObject *walk_result(Walk *w) {
  PyObject *self = PyDict_New(), *totals = PyList_New(w->t.n_order), *where = PyList_New(w->where_fn.len);
  PyObject *prefix = w->has_prefix ? ids_list(&w->prefix) : Py_NewRef(Py_None);
  if (self == NULL || totals == NULL || where == NULL || prefix == NULL)
    goto fail;
  for (Py_ssize_t i = 0; i < w->t.n_order; i++) {
    Py_ssize_t fn = w->t.order[i];
    PyObject *item = Py_BuildValue("(nN)", fn, long_of(w->t.total[fn]));
    if (item == NULL)
      goto fail;
    PyList_SET_ITEM(totals, i, item);
    if (w->t.has_self[fn]) {
      PyObject *k = PyLong_FromSsize_t(fn), *v = long_of(w->t.self[fn]);
      int rc = k != NULL && v != NULL ? PyDict_SetItem(self, k, v) : -1;
      Py_XDECREF(k);
      Py_XDECREF(v);
      if (rc < 0)
        goto fail;
    }
  }
  for (Py_ssize_t i = 0; i < w->where_fn.len; i++) {
    PyObject *item = Py_BuildValue("(nnN)", w->where_fn.items[i], w->where_src.items[i], long_of(w->where_sum[i]));
    if (item == NULL)
      goto fail;
    PyList_SET_ITEM(where, i, item);
  }
  return Py_BuildValue("(NNNN)", self, totals, where, prefix);
fail:
  Py_XDECREF(self);
  Py_XDECREF(totals);
  Py_XDECREF(where);
  Py_XDECREF(prefix);
  return NULL;
}

PyObject *paths_function_totals(PyObject *self, PyObject *args) {
  (void)self;
  Walk w = {0};
  PyObject *values, *result = NULL, *leaf, *value;
  if (!PyArg_ParseTuple(args, "O!O!O!OOn:function_totals", &PyDict_Type, &w.callsites, &PyDict_Type, &values,
                        &PyDict_Type, &w.frame_fns, &w.fns_of, &w.python, &w.no_python))
    return NULL;
  if (w.python != Py_None && !PyAnySet_Check(w.python)) {
    PyErr_SetString(PyExc_TypeError, "python must be a set or None");
    return NULL;
  }
  if (w.no_python < 0 || w.no_python > INT32_MAX || map_init(&w.where_at, 1024) < 0) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "no_python out of range");
    return NULL;
  }
  Py_ssize_t pos = 0, stamp = 0;
  while (PyDict_Next(values, &pos, &leaf, &value)) {
    __int128 v;
    if (value_of(value, &v) < 0)
      goto done;
    if (v == 0)
      continue;
    /* A callback (fns_of) may run Python code: keep the leaf and value alive across it. */
    Py_INCREF(leaf);
    int rc = walk_leaf(&w, leaf, v, stamp++);
    Py_DECREF(leaf);
    if (rc < 0)
      goto done;
  }
  result = walk_result(&w);
done:
  totals_free(&w.t);
  map_free(&w.where_at);
  PyMem_Free(w.where_fn.items);
  PyMem_Free(w.where_src.items);
  PyMem_Free(w.where_sum);
  PyMem_Free(w.path.items);
  PyMem_Free(w.prefix.items);
  return result;
}

