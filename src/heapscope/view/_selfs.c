/*
 * heapscope.view._paths.desampled_selfs: view/tree.py MergedTree.desampled_selfs in C. The
 * flamegraph de-samples every callsite of every process at every dump it carries (a build's
 * page: ~500 snapshots, a million callsite values), one Python call per value before.
 *
 * The object estimate is heapscope/estimate.py estimate_int's arithmetic for what `record`
 * writes (a callsite's real bytes known): the same double operations in the same order, and
 * Python's round-half-even. Anything else (no real bytes, numbers past 2^53 where C's doubles
 * and Python's int division could differ) is passed to the `estimate` callable given, which is
 * estimate_int itself; a sum past 64 bits gives None, and the caller sums in Python.
 *
 * heapscope.view._paths.size_cells: view/flamegraph_lifetimes.py's flat list of every node's
 * size cells, their allocations de-sampled the same way (a build's page: ~250k cells, 0.4 s
 * in Python).
 *
 * heapscope.view._paths.sparse: the page's (gap, value) pairs of a per-node list's non-zero
 * values (view/flamegraph.py _sparse): a build's page scans ~8M mostly zero values, 0.3 s in
 * Python.
 */
#include "_paths.h"

#include <limits.h>
#include <math.h>

#define EXACT_LIMIT (1LL << 53)

/* Python's round() of a float: half to even. */
static double round_half_even(double x) {
  double r = round(x);
  if (fabs(x - r) == 0.5)
    r = 2.0 * round(x / 2.0);
  return r;
}

/* estimate_int(samples, nbytes, interval, real) for interval > 1, in C when it can be;
 * -1 with no error set: ask Python; -1 with an error set: failed. */
static int estimate_c(long long samples, long long real, int has_real, long long interval, long long *out) {
  if (samples == 0) {
    *out = 0;
    return 0;
  }
  long long sign = 1;
  if (samples < 0) {
    if (samples == LLONG_MIN || (has_real && real == LLONG_MIN))
      return -1;
    samples = -samples;
    real = real < 0 ? -real : real;
    sign = -1;
  }
  if (!has_real || real <= 0 || samples > EXACT_LIMIT || real > EXACT_LIMIT || interval > EXACT_LIMIT)
    return -1;
  double x = (double)real / (double)samples / (double)interval;
  if (x >= 1.0) {
    *out = sign * samples;
    return 0;
  }
  double n = round_half_even((double)samples / -expm1(-x));
  if (!(n < 9.0e18))
    return -1;
  *out = sign * (long long)n;
  return 0;
}

/* The int of a tuple's field `i`; *overflow set when it does not fit 64 bits. */
static int field_ll(PyObject *tuple, Py_ssize_t i, long long *out, int *overflow) {
  PyObject *v = PyTuple_GET_ITEM(tuple, i);
  *out = PyLong_AsLongLongAndOverflow(v, overflow);
  return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* One object view's estimate: in C, or by the Python `estimate`. */
static int estimate_one(PyObject *estimate, PyObject *v, Py_ssize_t count_i, Py_ssize_t bytes_i, Py_ssize_t real_i,
                        long long interval, PyObject *py_interval, long long *out, int *overflow) {
  long long samples, real = 0;
  int has_real = 0;
  if (field_ll(v, count_i, &samples, overflow) < 0)
    return -1;
  if (*overflow)
    return 0;
  if (PyTuple_GET_SIZE(v) > real_i && PyTuple_GET_ITEM(v, real_i) != Py_None) {
    if (field_ll(v, real_i, &real, overflow) < 0)
      return -1;
    has_real = !*overflow;
    *overflow = 0;
  }
  if (estimate_c(samples, real, has_real, interval, out) == 0)
    return 0;
  PyObject *got = PyObject_CallFunctionObjArgs(
      estimate, PyTuple_GET_ITEM(v, count_i), PyTuple_GET_ITEM(v, bytes_i), py_interval,
      PyTuple_GET_SIZE(v) > real_i ? PyTuple_GET_ITEM(v, real_i) : Py_None, NULL);
  if (got == NULL)
    return -1;
  *out = PyLong_AsLongLongAndOverflow(got, overflow);
  Py_DECREF(got);
  return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *sums_list(const long long *sums, Py_ssize_t n) {
  PyObject *list = PyList_New(n);
  if (list == NULL)
    return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *v = PyLong_FromLongLong(sums[i]);
    if (v == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, v);
  }
  return list;
}

/* Adds the four views of `v` to node `node`'s sums; 1 when something overflowed. */
static int add_values(PyObject *v, Py_ssize_t node, long long *sums[4], long long interval, PyObject *py_interval,
                      PyObject *estimate) {
  long long x[4];
  int overflow = 0;
  for (int k = 0; k < 4; k += 2) { /* space, alloc_space */
    if (field_ll(v, k, &x[k], &overflow) < 0)
      return -1;
    if (overflow)
      return 1;
  }
  for (int k = 1; k < 4; k += 2) { /* objects, alloc_objects: samples of the bytes before them */
    if (interval > 1) {
      if (estimate_one(estimate, v, k, k - 1, 4 + k / 2, interval, py_interval, &x[k], &overflow) < 0)
        return -1;
    } else if (field_ll(v, k, &x[k], &overflow) < 0) {
      return -1;
    }
    if (overflow)
      return 1;
  }
  for (int k = 0; k < 4; k++)
    if (__builtin_add_overflow(sums[k][node], x[k], &sums[k][node]))
      return 1;
  return 0;
}

PyObject *paths_desampled_selfs(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *node_of, *values, *py_interval, *estimate;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "O!O!nO!O:desampled_selfs", &PyDict_Type, &node_of, &PyDict_Type, &values, &n,
                        &PyLong_Type, &py_interval, &estimate))
    return NULL;
  int big = 0;
  long long interval = PyLong_AsLongLongAndOverflow(py_interval, &big);
  if (interval == -1 && PyErr_Occurred())
    return NULL;
  if (big) /* a crafted profile's interval past 64 bits: the caller's Python arithmetic */
    Py_RETURN_NONE;
  if (n < 0) {
    PyErr_SetString(PyExc_ValueError, "desampled_selfs: a negative node count");
    return NULL;
  }
  long long *buf = PyMem_Calloc(4 * (size_t)n + 1, sizeof *buf);
  if (buf == NULL)
    return PyErr_NoMemory();
  long long *sums[4] = {buf, buf + n, buf + 2 * n, buf + 3 * n};
  PyObject *result = NULL, *cs, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(values, &pos, &cs, &v)) {
    PyObject *node_obj = PyDict_GetItemWithError(node_of, cs);
    if (node_obj == NULL) {
      if (PyErr_Occurred())
        goto done;
      continue;
    }
    Py_ssize_t node = PyLong_AsSsize_t(node_obj);
    if (node == -1 && PyErr_Occurred())
      goto done;
    if (node < 0 || node >= n) {
      PyErr_SetString(PyExc_IndexError, "desampled_selfs: a node out of the tree");
      goto done;
    }
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) < 4) {
      PyErr_SetString(PyExc_TypeError, "desampled_selfs: values must be ViewValues");
      goto done;
    }
    Py_INCREF(v); /* the estimate's call could change the dict */
    int got = add_values(v, node, sums, interval, py_interval, estimate);
    Py_DECREF(v);
    if (got < 0)
      goto done;
    if (got > 0) { /* past 64 bits: the caller sums these in Python */
      result = Py_NewRef(Py_None);
      goto done;
    }
  }
  result = PyTuple_New(4);
  if (result == NULL)
    goto done;
  for (int k = 0; k < 4; k++) {
    PyObject *list = sums_list(sums[k], n);
    if (list == NULL) {
      Py_CLEAR(result);
      goto done;
    }
    PyTuple_SET_ITEM(result, k, list);
  }
done:
  PyMem_Free(buf);
  return result;
}

/* One size cell's (lo, hi) key and (count, size, real) value, by pointer into the dict. */
typedef struct {
  long long lo, hi;
  PyObject *value;
} SizeCell;

static int cell_cmp(const void *pa, const void *pb) {
  const SizeCell *a = pa, *b = pb;
  if (a->lo != b->lo)
    return a->lo < b->lo ? -1 : 1;
  return a->hi < b->hi ? -1 : a->hi > b->hi;
}

/* Appends `n` objects to `out`, stealing each reference (NULL ones mean a failed call): 0, -1. */
static int append_stolen(PyObject *out, PyObject **items, int n) {
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (rc == 0 && (items[i] == NULL || PyList_Append(out, items[i]) < 0))
      rc = -1;
    Py_XDECREF(items[i]);
  }
  return rc;
}

/* A callsite's size cells, sorted by (lo, hi), appended to `out`: 0, 1: a key or value C does
 * not take as is (None: the Python loop), -1: error. */
static int add_size_cells(PyObject *out, PyObject *node1, PyObject *cells, long long interval, PyObject *py_interval,
                          PyObject *estimate) {
  Py_ssize_t n = PyDict_GET_SIZE(cells), pos = 0, k = 0;
  SizeCell *sorted = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
  if (sorted == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  PyObject *key, *value;
  int rc = 0, overflow = 0;
  while (rc == 0 && PyDict_Next(cells, &pos, &key, &value)) {
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2 || !PyTuple_Check(value) ||
        PyTuple_GET_SIZE(value) != 3) {
      rc = 1;
      break;
    }
    SizeCell *c = &sorted[k++];
    c->value = value;
    if (field_ll(key, 0, &c->lo, &overflow) < 0 || field_ll(key, 1, &c->hi, &overflow) < 0)
      rc = -1;
    else if (overflow)
      rc = 1;
  }
  if (rc == 0)
    qsort(sorted, (size_t)k, sizeof *sorted, cell_cmp);
  for (Py_ssize_t i = 0; rc == 0 && i < k; i++) {
    PyObject *v = sorted[i].value;
    long long count, real, est;
    int has_real = PyTuple_GET_ITEM(v, 2) != Py_None;
    if (field_ll(v, 0, &count, &overflow) < 0 || (has_real && field_ll(v, 2, &real, &overflow) < 0)) {
      rc = -1;
      break;
    }
    if (overflow) {
      rc = 1;
      break;
    }
    long long lo = sorted[i].lo;
    int bucket = lo > 1 ? 63 - __builtin_clzll((unsigned long long)lo) : 0;  /* max(lo, 1).bit_length() - 1 */
    PyObject *items[4] = {Py_NewRef(node1), PyLong_FromLong(bucket), NULL, Py_NewRef(PyTuple_GET_ITEM(v, 1))};
    if (interval <= 1)
      items[2] = Py_NewRef(PyTuple_GET_ITEM(v, 0));
    else if (estimate_c(count, has_real ? real : 0, has_real, interval, &est) == 0)
      items[2] = PyLong_FromLongLong(est);
    else if (!PyErr_Occurred())
      items[2] = PyObject_CallFunctionObjArgs(estimate, PyTuple_GET_ITEM(v, 0), PyTuple_GET_ITEM(v, 1), py_interval,
                                              PyTuple_GET_ITEM(v, 2), NULL);
    rc = append_stolen(out, items, 4);
  }
  PyMem_Free(sorted);
  return rc;
}

PyObject *paths_size_cells(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *node_of, *given, *py_interval, *estimate;
  if (!PyArg_ParseTuple(args, "O!OO!O:size_cells", &PyDict_Type, &node_of, &given, &PyLong_Type, &py_interval,
                        &estimate))
    return NULL;
  int big = 0;
  long long interval = PyLong_AsLongLongAndOverflow(py_interval, &big);
  if (interval == -1 && PyErr_Occurred())
    return NULL;
  if (big)
    Py_RETURN_NONE;
  /* A list or tuple as it is (another sequence copied). Its size is read at every step: the
   * estimate's Python call could change the list. */
  PyObject *items = PySequence_Fast(given, "size_cells() takes a sequence of (callsite, cells)");
  PyObject *out = items == NULL ? NULL : PyList_New(0);
  if (out == NULL) {
    Py_XDECREF(items);
    return NULL;
  }
  int rc = 0;
  for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(items); i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(items, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyDict_CheckExact(PyTuple_GET_ITEM(item, 1))) {
      rc = 1;
      break;
    }
    Py_INCREF(item);
    PyObject *node = PyDict_GetItemWithError(node_of, PyTuple_GET_ITEM(item, 0)), *node1 = NULL;
    Py_ssize_t at = node != NULL && PyLong_CheckExact(node) ? PyLong_AsSsize_t(node) : -1;
    if (node == NULL)
      rc = PyErr_Occurred() ? -1 : 0;  /* a callsite the tree does not show */
    else if (at < 0)
      rc = PyErr_Occurred() ? -1 : 1;
    else if ((node1 = PyLong_FromSsize_t(at + 1)) == NULL)  /* the page's node 0 is its synthetic root */
      rc = -1;
    else
      rc = add_size_cells(out, node1, PyTuple_GET_ITEM(item, 1), interval, py_interval, estimate);
    Py_XDECREF(node1);
    Py_DECREF(item);
  }
  Py_DECREF(items);
  if (rc == 0)
    return out;
  Py_DECREF(out);
  if (rc < 0)
    return NULL;
  Py_RETURN_NONE;
}

PyObject *paths_sparse(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *values;
  Py_ssize_t shift;
  if (!PyArg_ParseTuple(args, "O!n:sparse", &PyList_Type, &values, &shift))
    return NULL;
  PyObject *out = PyList_New(0);
  if (out == NULL)
    return NULL;
  Py_ssize_t last = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
    PyObject *v = PyList_GET_ITEM(values, i);
    int nonzero = PyObject_IsTrue(v); /* what itertools.compress asks of each */
    if (nonzero < 0)
      goto fail;
    if (!nonzero)
      continue;
    Py_INCREF(v); /* a value's __bool__ could have changed the list */
    PyObject *gap = PyLong_FromSsize_t(i + shift - last);
    int rc = gap == NULL || PyList_Append(out, gap) < 0 || PyList_Append(out, v) < 0;
    Py_XDECREF(gap);
    Py_DECREF(v);
    if (rc)
      goto fail;
    last = i + shift;
  }
  return out;
fail:
  Py_DECREF(out);
  return NULL;
}
