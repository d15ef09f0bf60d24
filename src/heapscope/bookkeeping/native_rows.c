/*
 * native_rows.c: the tracker's rows as the store's lists (native_rows.h).
 */
#include "native_rows.h"

#include <string.h>

#include "tracker.h"

/* Append `n` new references to `out`, taking them (NULL among them: an error set, all released). */
static int append_taken(PyObject *out, PyObject **v, int n) {
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (!v[i] || (rc == 0 && PyList_Append(out, v[i]) < 0)) rc = -1;
    Py_XDECREF(v[i]);
  }
  return rc;
}

PyObject *hs_sample_values(const void *buf, Py_ssize_t len, uint64_t not_freed, const struct hs_resolver *s) {
  if ((size_t)len % sizeof(struct hs_sample_row)) {
    PyErr_Format(PyExc_ValueError, "%zd bytes are not sample rows", len);
    return NULL;
  }
  PyObject *out = PyList_New(0);
  for (size_t i = 0; out && i < (size_t)len / sizeof(struct hs_sample_row); i++) {
    struct hs_sample_row r;
    memcpy(&r, (const char *)buf + i * sizeof r, sizeof r);
    /* Its stack's callsite when the tracker had none for it: resolved since (the final dump's). */
    int64_t cs = r.callsite_id ? 0 : hs_resolver_callsite(s, r.stack_id);
    if (!r.callsite_id && !cs) continue; /* a stack with no callsite: left out */
    PyObject *v[5] = {r.callsite_id ? PyLong_FromUnsignedLongLong(r.callsite_id) : PyLong_FromLongLong(cs),
                      PyLong_FromUnsignedLongLong(r.alloc_ts),
                      r.free_ts == not_freed ? Py_NewRef(Py_None) : PyLong_FromUnsignedLongLong(r.free_ts),
                      PyLong_FromUnsignedLongLong(r.size), PyLong_FromUnsignedLongLong(r.weight)};
    if (append_taken(out, v, 5) < 0) Py_CLEAR(out);
  }
  return out;
}

/* A 2-tuple's items, borrowed; -1 with TypeError when `t` is not one. */
static int pair(PyObject *t, PyObject **a, PyObject **b) {
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) {
    PyErr_SetString(PyExc_TypeError, "a bucket's bounds are a (low, high) tuple");
    return -1;
  }
  *a = PyTuple_GET_ITEM(t, 0);
  *b = PyTuple_GET_ITEM(t, 1);
  return 0;
}

PyObject *hs_native_lifetime_values(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer b;
  PyObject *kinds, *life, *sizes;
  unsigned long long size_kind;
  if (!PyArg_ParseTuple(args, "y*O!O!O!K:lifetime_values", &b, &PyTuple_Type, &kinds, &PyTuple_Type, &life,
                        &PyTuple_Type, &sizes, &size_kind))
    return NULL;
  PyObject *out_life = PyList_New(0), *out_sizes = PyList_New(0), *result = NULL;
  const size_t n = (size_t)b.len / sizeof(struct hs_lifetime_row);
  if (!out_life || !out_sizes) goto done;
  if ((size_t)b.len % sizeof(struct hs_lifetime_row)) {
    PyErr_Format(PyExc_ValueError, "%zd bytes are not lifetime rows", b.len);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    struct hs_lifetime_row r;
    memcpy(&r, (const char *)b.buf + i * sizeof r, sizeof r);
    PyObject *size_lo, *size_hi, *lo, *hi;
    if ((r.bucket & 0xFF) >= (uint64_t)PyTuple_GET_SIZE(sizes)) {
      PyErr_SetString(PyExc_IndexError, "a size bucket past the bounds given");
      goto done;
    }
    if (pair(PyTuple_GET_ITEM(sizes, (Py_ssize_t)(r.bucket & 0xFF)), &size_lo, &size_hi) < 0) goto done;
    if (r.kind == size_kind) {
      Py_INCREF(size_lo);
      Py_INCREF(size_hi);
      PyObject *v[6] = {PyLong_FromUnsignedLongLong(r.callsite_id), size_lo, size_hi,
                        PyLong_FromUnsignedLongLong(r.count), PyLong_FromUnsignedLongLong(r.size),
                        PyLong_FromUnsignedLongLong(r.real_size)};
      if (append_taken(out_sizes, v, 6) < 0) goto done;
      continue;
    }
    /* A kind the store has no row for (kinds[kind] None, or past them) is left out. */
    if (r.kind >= (uint64_t)PyTuple_GET_SIZE(kinds) || PyTuple_GET_ITEM(kinds, (Py_ssize_t)r.kind) == Py_None)
      continue;
    PyObject *bounds = r.kind < (uint64_t)PyTuple_GET_SIZE(life) ? PyTuple_GET_ITEM(life, (Py_ssize_t)r.kind)
                                                                 : Py_None;
    if (bounds == Py_None) { /* an untimed kind: its lifetime is [0, open) */
      lo = PyLong_FromLong(0);
      hi = Py_NewRef(Py_None);
    } else {
      if (!PyTuple_Check(bounds) || (r.bucket >> 8) >= (uint64_t)PyTuple_GET_SIZE(bounds)) {
        PyErr_SetString(PyExc_IndexError, "a lifetime bucket past the bounds given");
        goto done;
      }
      if (pair(PyTuple_GET_ITEM(bounds, (Py_ssize_t)(r.bucket >> 8)), &lo, &hi) < 0) goto done;
      Py_INCREF(lo);
      Py_INCREF(hi);
    }
    Py_INCREF(size_lo);
    Py_INCREF(size_hi);
    PyObject *v[9] = {PyLong_FromUnsignedLongLong(r.callsite_id), Py_NewRef(PyTuple_GET_ITEM(kinds, (Py_ssize_t)r.kind)),
                      lo, hi, size_lo, size_hi, PyLong_FromUnsignedLongLong(r.count),
                      PyLong_FromUnsignedLongLong(r.size), PyLong_FromUnsignedLongLong(r.real_size)};
    if (append_taken(out_life, v, 9) < 0) goto done;
  }
  result = PyTuple_Pack(2, out_life, out_sizes);
done:
  PyBuffer_Release(&b);
  Py_XDECREF(out_life);
  Py_XDECREF(out_sizes);
  return result;
}

