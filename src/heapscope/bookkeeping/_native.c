/*
 * _native.c: the Python face of the bookkeeping's C state
 * (heapscope.bookkeeping._native; the interface is in _native.pyi).
 *
 *   Tracker   one process's heap bookkeeping (tracker.h): ops in, rows out.
 *   Trie      the callsite trie shared by every process (trie.h).
 *   Resolver  one process's stacks, kept as records until resolved into the
 *             Trie and the Tracker (resolver.h).
 *   addr2line a Python code object's line (pylines.h).
 *   lifetime_values  the tracker's lifetime rows as the store's (dump.py gives the bounds).
 *
 * The producer's ring reader (producer/_ingest.c) makes a Tracker and a
 * Resolver per process and feeds them from its ring (native.h). Every row
 * crosses as packed bytes of the structs of tracker.h, mirrored in rows.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "native.h"
#include "native_rows.h"
#include "pylines.h"
#include "resolver.h"
#include "tracker.h"
#include "tracker_labels.h"
#include "trie.h"
#include "wire.h"

/* ---- Tracker ---- */

static void tracker_release(TrackerObject *self) {
  if (self->t) {
    hs_tracker_destroy(self->t);
    PyMem_RawFree(self->t);
    self->t = NULL;
  }
}

#define tracker_check hs_tracker_object_check
#define tracker_oom hs_tracker_object_oom

static int Tracker_init(TrackerObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"stream", "dump_at_max", "threads", NULL};
  int stream = 0, dump_at_max = 0, threads = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$ppp:Tracker", kwlist, &stream, &dump_at_max, &threads))
    return -1;
  if (self->busy || (self->t && self->t->pk->busy)) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
    return -1;
  }
  tracker_release(self);
  struct hs_tracker *t = PyMem_RawMalloc(sizeof *t);
  if (!t || hs_tracker_init(t, stream, dump_at_max) < 0) {
    PyMem_RawFree(t);
    PyErr_NoMemory();
    return -1;
  }
  if (threads && hs_tracker_keep_threads(t) < 0) {
    hs_tracker_destroy(t);
    PyMem_RawFree(t);
    PyErr_NoMemory();
    return -1;
  }
  self->t = t;
  return 0;
}

static void Tracker_dealloc(TrackerObject *self) {
  tracker_release(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Tracker_malloc(TrackerObject *self, PyObject *args) {
  unsigned long long seq, addr, alloc_size, sample_size, stack_id, ts, now_ns;
  unsigned int tid = 0, label_set = 0;
  if (!PyArg_ParseTuple(args, "KKKKKKK|II:malloc", &seq, &addr, &alloc_size, &sample_size, &stack_id, &ts,
                        &now_ns, &tid, &label_set))
    return NULL;
  if (tracker_check(self) < 0) return NULL;
  hs_tracker_malloc_labelled(self->t, seq, addr, alloc_size, sample_size, stack_id, ts, (uint32_t)tid,
                             (uint32_t)label_set, now_ns);
  return tracker_oom(self->t, Py_NewRef(Py_None));
}

static PyObject *Tracker_free(TrackerObject *self, PyObject *args) {
  unsigned long long seq, addr, now_ns, ts = 0;
  if (!PyArg_ParseTuple(args, "KKK|K:free", &seq, &addr, &now_ns, &ts)) return NULL;
  if (tracker_check(self) < 0) return NULL;
  hs_tracker_free_at(self->t, seq, addr, ts, now_ns);
  return tracker_oom(self->t, Py_NewRef(Py_None));
}

static PyObject *Tracker_expire(TrackerObject *self, PyObject *arg) {
  unsigned long long now_ns = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (tracker_check(self) < 0) return NULL;
  hs_tracker_expire(self->t, now_ns);
  return tracker_oom(self->t, Py_NewRef(Py_None));
}

static PyObject *Tracker_flush(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  if (tracker_check(self) < 0) return NULL;
  hs_tracker_flush(self->t);
  return tracker_oom(self->t, Py_NewRef(Py_None));
}

static PyObject *Tracker_set_callsite(TrackerObject *self, PyObject *args) {
  unsigned long long stack_id, callsite_id;
  if (!PyArg_ParseTuple(args, "KK:set_callsite", &stack_id, &callsite_id)) return NULL;
  if (tracker_check(self) < 0) return NULL;
  if (callsite_id == 0) {
    PyErr_SetString(PyExc_ValueError, "callsite ids start at 1");
    return NULL;
  }
  if (hs_tracker_set_callsite(self->t, stack_id, callsite_id) < 0) return PyErr_NoMemory();
  Py_RETURN_NONE;
}

/* The rows a hs_tracker_* row call left in t->out, as bytes. */
static PyObject *rows(TrackerObject *self, int64_t (*fill)(struct hs_tracker *)) {
  if (tracker_check(self) < 0) return NULL;
  if (fill(self->t) < 0) return PyErr_NoMemory();
  return PyBytes_FromStringAndSize((const char *)self->t->out.p, (Py_ssize_t)self->t->out.len);
}

static PyObject *Tracker_dump(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_dump);
}

static PyObject *Tracker_peak(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_peak);
}

static PyObject *Tracker_new_window(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  if (tracker_check(self) < 0) return NULL;
  if (hs_tracker_new_window(self->t) < 0) return PyErr_NoMemory();
  Py_RETURN_NONE;
}

static PyObject *Tracker_window(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_window);
}

static PyObject *Tracker_totals(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_totals);
}

static PyObject *Tracker_live(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_live);
}

static PyObject *Tracker_threads(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_threads);
}

static PyObject *Tracker_series(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_series);
}

static PyObject *Tracker_samples(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_samples);
}

static PyObject *Tracker_label_dump(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_label_dump);
}

static PyObject *Tracker_label_peak(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_label_peak);
}

static PyObject *Tracker_lifetimes(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  return rows(self, hs_tracker_lifetimes);
}

static PyObject *Tracker_unresolved(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  if (tracker_check(self) < 0) return NULL;
  int64_t n = hs_tracker_unresolved(self->t);
  if (n < 0) return PyErr_NoMemory();
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  const uint64_t *ids = (const uint64_t *)self->t->out.p;
  for (int64_t i = 0; i < n; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(ids[i]);
    if (!v) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  return list;
}

static PyObject *Tracker_take_stream(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  if (tracker_check(self) < 0) return NULL;
  struct hs_buf *b = &self->t->stream_rows;
  PyObject *out = PyBytes_FromStringAndSize((const char *)b->p, (Py_ssize_t)b->len);
  if (!out) return NULL;
  b->len = 0;
  return out;
}

static int put_stat(PyObject *d, const char *key, uint64_t value) {
  PyObject *v = PyLong_FromUnsignedLongLong(value);
  if (!v) return -1;
  int r = PyDict_SetItemString(d, key, v);
  Py_DECREF(v);
  return r;
}

static int tracker_stats_into(const struct hs_tracker *t, PyObject *d) {
  uint64_t peak_ts = 0, peak = hs_tracker_process_peak(t, &peak_ts);
  return (put_stat(d, "late_records", t->st.late_records) < 0 ||
          put_stat(d, "gaps_skipped", t->st.gaps_skipped) < 0 || put_stat(d, "pending", t->pending.n) < 0 ||
          put_stat(d, "live_allocations", t->live.count) < 0 ||
          put_stat(d, "implicit_frees", t->st.implicit_frees) < 0 ||
          put_stat(d, "untracked_frees", t->st.untracked_frees) < 0 ||
          put_stat(d, "committed_seq", t->committed_seq) < 0 ||
          put_stat(d, "max_pending", t->st.max_pending) < 0 ||
          put_stat(d, "sampled_bytes", hs_tracker_sampled_bytes(t)) < 0 ||
          put_stat(d, "current_unfreed", t->cur_unfreed) < 0 ||
          put_stat(d, "peak_unfreed", peak) < 0 || put_stat(d, "peak_ts", peak_ts) < 0 ||
          put_stat(d, "window_base", t->pk->win_base) < 0 || put_stat(d, "window_peak", t->pk->max_unfreed) < 0 ||
          put_stat(d, "joint_unfreed", t->pk->cur_unfreed) < 0 || put_stat(d, "peak_heaps", t->pk->n) < 0)
             ? -1
             : 0;
}

static PyObject *Tracker_stats(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  if (tracker_check(self) < 0) return NULL;
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  if (tracker_stats_into(self->t, d) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

static PyObject *Tracker_share_peak(TrackerObject *self, PyObject *arg) {
  if (!PyObject_TypeCheck(arg, Py_TYPE(self))) {
    PyErr_SetString(PyExc_TypeError, "share_peak() takes a Tracker");
    return NULL;
  }
  TrackerObject *with = (TrackerObject *)arg;
  if (tracker_check(self) < 0 || tracker_check(with) < 0) return NULL;
  if (hs_tracker_share_peak(self->t, with->t) < 0) {
    PyErr_SetString(PyExc_ValueError, "share_peak(): only a tracker that has had no op and shares no peak joins"
                                      " another's peak (of at most 8 trackers)");
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *Tracker_close(TrackerObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->busy || (self->t && self->t->pk->busy)) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
    return NULL;
  }
  tracker_release(self);
  Py_RETURN_NONE;
}

static PyObject *Tracker_get_keeps_threads(TrackerObject *self, void *Py_UNUSED(closure)) {
  if (!self->t) {
    PyErr_SetString(PyExc_ValueError, "Tracker is closed");
    return NULL;
  }
  return PyBool_FromLong(self->t->threads);
}

static PyObject *Tracker_get_peak_group(TrackerObject *self, void *Py_UNUSED(closure)) {
  if (!self->t) {
    PyErr_SetString(PyExc_ValueError, "Tracker is closed");
    return NULL;
  }
  return PyLong_FromVoidPtr(self->t->pk);
}

static PyObject *Tracker_get_last_ts(TrackerObject *self, void *Py_UNUSED(closure)) {
  if (!self->t) {
    PyErr_SetString(PyExc_ValueError, "Tracker is closed");
    return NULL;
  }
  return PyLong_FromUnsignedLongLong(self->t->last_ts);
}

static PyMethodDef Tracker_methods[] = {
    {"malloc", (PyCFunction)Tracker_malloc, METH_VARARGS,
     "malloc(seq, addr, alloc_size, sample_size, stack_id, ts, now_ns, tid=0) -> None"},
    {"free", (PyCFunction)Tracker_free, METH_VARARGS, "free(seq, addr, now_ns) -> None"},
    {"expire", (PyCFunction)Tracker_expire, METH_O, "expire(now_ns) -> None"},
    {"flush", (PyCFunction)Tracker_flush, METH_NOARGS, "flush() -> None"},
    {"set_callsite", (PyCFunction)Tracker_set_callsite, METH_VARARGS, "set_callsite(stack_id, callsite_id) -> None"},
    {"dump", (PyCFunction)Tracker_dump, METH_NOARGS, "dump() -> bytes (DUMP_ROW rows)"},
    {"peak", (PyCFunction)Tracker_peak, METH_NOARGS, "peak() -> bytes (PEAK_ROW rows)"},
    {"new_window", (PyCFunction)Tracker_new_window, METH_NOARGS, "new_window() -> None"},
    {"share_peak", (PyCFunction)Tracker_share_peak, METH_O, "share_peak(other) -> None"},
    {"window", (PyCFunction)Tracker_window, METH_NOARGS, "window() -> bytes (WINDOW_ROW rows)"},
    {"totals", (PyCFunction)Tracker_totals, METH_NOARGS, "totals() -> bytes (TOTALS_ROW rows)"},
    {"live", (PyCFunction)Tracker_live, METH_NOARGS, "live() -> bytes (LIVE_ROW rows)"},
    {"threads", (PyCFunction)Tracker_threads, METH_NOARGS, "threads() -> bytes (THREAD_ROW rows)"},
    {"series", (PyCFunction)Tracker_series, METH_NOARGS, "series() -> bytes (SERIES_ROW rows)"},
    {"samples", (PyCFunction)Tracker_samples, METH_NOARGS, "samples() -> bytes (SAMPLE_ROW rows)"},
    {"label_dump", (PyCFunction)Tracker_label_dump, METH_NOARGS, "label_dump() -> bytes (LABEL_DUMP_ROW rows)"},
    {"label_peak", (PyCFunction)Tracker_label_peak, METH_NOARGS, "label_peak() -> bytes (LABEL_PEAK_ROW rows)"},
    {"lifetimes", (PyCFunction)Tracker_lifetimes, METH_NOARGS, "lifetimes() -> bytes (LIFETIME_ROW rows)"},
    {"unresolved", (PyCFunction)Tracker_unresolved, METH_NOARGS, "unresolved() -> list[int]"},
    {"take_stream", (PyCFunction)Tracker_take_stream, METH_NOARGS, "take_stream() -> bytes (STREAM_ROW rows)"},
    {"stats", (PyCFunction)Tracker_stats, METH_NOARGS, "stats() -> dict[str, int]"},
    {"close", (PyCFunction)Tracker_close, METH_NOARGS, "close() -> None"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tracker_getset[] = {
    {"last_ts", (getter)Tracker_get_last_ts, NULL, "Largest MALLOC ts applied so far (ns).", NULL},
    {"keeps_threads", (getter)Tracker_get_keeps_threads, NULL, "Totals per (stack, thread) are kept.", NULL},
    {"peak_group", (getter)Tracker_get_peak_group, NULL, "Equal for trackers sharing one peak.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "heapscope.bookkeeping._native.Tracker",
    .tp_basicsize = sizeof(TrackerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tracker(*, stream=False, dump_at_max=False, threads=False)\n--\n\nOne process's heap bookkeeping.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tracker_init,
    .tp_dealloc = (destructor)Tracker_dealloc,
    .tp_methods = Tracker_methods,
    .tp_getset = Tracker_getset,
};

/* ---- Trie ---- */

typedef struct {
  PyObject_HEAD
  struct hs_trie t;
} TrieObject;

static void Trie_dealloc(TrieObject *self) {
  hs_trie_destroy(&self->t);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Trie_callsite(TrieObject *self, PyObject *arg) {
  PyObject *seq = PySequence_Fast(arg, "callsite() takes a sequence of frame ids");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n == 0) {
    Py_DECREF(seq);
    PyErr_SetString(PyExc_ValueError, "a callsite needs at least one frame");
    return NULL;
  }
  int64_t node = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long long f = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (f == (unsigned long long)-1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return NULL;
    }
    if (f > UINT32_MAX) {
      Py_DECREF(seq);
      PyErr_SetString(PyExc_OverflowError, "frame id above 2^32 - 1");
      return NULL;
    }
    node = hs_trie_child(&self->t, (uint32_t)node, (uint32_t)f);
    if (node < 0) {
      Py_DECREF(seq);
      return PyErr_NoMemory();
    }
  }
  Py_DECREF(seq);
  return PyLong_FromLongLong(node);
}

/* A tuple of n items made by PyLong_FromUnsignedLong (Py_None for a 0 where none0). */
static PyObject *int_tuple(const unsigned long *v, int n, int none0) {
  PyObject *t = PyTuple_New(n);
  if (!t) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *x = (none0 == i && !v[i]) ? Py_NewRef(Py_None) : PyLong_FromUnsignedLong(v[i]);
    if (!x) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

/* Rows of the nodes with ids from `first` (1-based) on: (id, depth, parent or None, frame) or (parent or 0, frame). */
static PyObject *trie_rows(const struct hs_trie *t, size_t first, int full) {
  size_t from = first ? first - 1 : 0;
  if (from > t->count) from = t->count;
  PyObject *list = PyList_New((Py_ssize_t)(t->count - from));
  if (!list) return NULL;
  for (size_t k = from; k < t->count; k++) {
    unsigned long v[4] = {(unsigned long)(k + 1), t->depth[k], t->parent[k], t->frame[k]};
    PyObject *row = full ? int_tuple(v, 4, 2) : int_tuple(v + 2, 2, -1);
    if (!row) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)(k - from), row);
  }
  return list;
}

static PyObject *Trie_take_new(TrieObject *self, PyObject *Py_UNUSED(ignored)) {
  PyObject *rows = trie_rows(&self->t, self->t.taken + 1, 1);
  if (rows) self->t.taken = self->t.count;
  return rows;
}

/* take_new()'s rows as one flat list, id, depth, parent or None, frame after another: what the
   writer binds in statements of many rows each (store/writer.py add_callsites_flat), without a
   tuple per row. */
static PyObject *Trie_take_new_flat(TrieObject *self, PyObject *Py_UNUSED(ignored)) {
  const struct hs_trie *t = &self->t;
  size_t from = t->taken < t->count ? t->taken : t->count;
  PyObject *list = PyList_New((Py_ssize_t)(4 * (t->count - from)));
  if (!list) return NULL;
  Py_ssize_t j = 0;
  for (size_t k = from; k < t->count; k++) {
    unsigned long v[4] = {(unsigned long)(k + 1), t->depth[k], t->parent[k], t->frame[k]};
    for (int i = 0; i < 4; i++) {
      PyObject *x = (i == 2 && !v[i]) ? Py_NewRef(Py_None) : PyLong_FromUnsignedLong(v[i]);
      if (!x) {
        Py_DECREF(list);
        return NULL;
      }
      PyList_SET_ITEM(list, j++, x);
    }
  }
  self->t.taken = t->count;
  return list;
}

static PyObject *Trie_paths_from(TrieObject *self, PyObject *arg) {
  long long first = PyLong_AsLongLong(arg);
  if (first == -1 && PyErr_Occurred()) return NULL;
  return trie_rows(&self->t, first > 0 ? (size_t)first : 0, 0);
}

static Py_ssize_t Trie_len(TrieObject *self) {
  return (Py_ssize_t)self->t.count;
}

static PyMethodDef Trie_methods[] = {
    {"callsite", (PyCFunction)Trie_callsite, METH_O,
     "callsite(frames) -> int\n--\n\nThe callsite of frames (root first), made when missing."},
    {"take_new", (PyCFunction)Trie_take_new, METH_NOARGS,
     "take_new() -> list[tuple[int, int, int | None, int]]\n--\n\n(id, depth, parent, frame) of the nodes made since."},
    {"take_new_flat", (PyCFunction)Trie_take_new_flat, METH_NOARGS,
     "take_new_flat() -> list[int | None]\n--\n\ntake_new()'s rows, flattened: id, depth, parent, frame, id, ..."},
    {"paths_from", (PyCFunction)Trie_paths_from, METH_O,
     "paths_from(first) -> list[tuple[int, int]]\n--\n\n(parent or 0, frame) of the nodes from id first on."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Trie_as_sequence = {
    .sq_length = (lenfunc)Trie_len,
};

static PyTypeObject TrieType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "heapscope.bookkeeping._native.Trie",
    .tp_basicsize = sizeof(TrieObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trie()\n--\n\nThe callsite trie shared by every process of a recording (trie.h).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Trie_dealloc,
    .tp_methods = Trie_methods,
    .tp_as_sequence = &Trie_as_sequence,
};

/* ---- Resolver ---- */

static int resolver_check(ResolverObject *self) {
  if (!self->s) {
    PyErr_SetString(PyExc_ValueError, "Resolver is closed");
    return -1;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
    return -1;
  }
  return 0;
}

static void resolver_release(ResolverObject *self) {
  if (self->s) {
    hs_resolver_destroy(self->s);
    PyMem_RawFree(self->s);
    self->s = NULL;
  }
}

static int Resolver_init(ResolverObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Resolver", kwlist)) return -1;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
    return -1;
  }
  resolver_release(self);
  self->s = PyMem_RawCalloc(1, sizeof *self->s);
  if (!self->s) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

static void Resolver_dealloc(ResolverObject *self) {
  resolver_release(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* keep(record): what the ring reader does with a STACK record, for a caller without a ring. */
static PyObject *Resolver_keep(ResolverObject *self, PyObject *arg) {
  Py_buffer rec;
  if (PyObject_GetBuffer(arg, &rec, PyBUF_SIMPLE) < 0) return NULL;
  if (resolver_check(self) < 0) {
    PyBuffer_Release(&rec);
    return NULL;
  }
  const uint8_t *p = rec.buf;
  uint64_t hdr = 0;
  if (rec.len >= 8) memcpy(&hdr, p, sizeof hdr);
  int ok = rec.len >= 8 && rec.len <= UINT32_MAX && HS_RECORD_TYPE(hdr) == HS_REC_STACK &&
           HS_RECORD_SIZE(hdr) == (uint64_t)rec.len && hs_resolver_record_ok(p + 8, (uint64_t)rec.len - 8);
  int rc = ok ? hs_resolver_keep(self->s, p, (uint32_t)rec.len) : 0;
  PyBuffer_Release(&rec);
  if (!ok) {
    PyErr_SetString(PyExc_ValueError, "keep() takes one whole, well-formed STACK record");
    return NULL;
  }
  if (rc < 0) return PyErr_NoMemory();
  Py_RETURN_NONE;
}

static PyObject *Resolver_held_stack(ResolverObject *self, PyObject *arg) {
  unsigned long long stack_id = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (resolver_check(self) < 0) return NULL;
  uint32_t size = 0;
  const uint8_t *rec = hs_resolver_held(self->s, stack_id, &size);
  if (!rec) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize((const char *)rec, size);
}

static PyObject *Resolver_define_code(ResolverObject *self, PyObject *arg) {
  unsigned long long key = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (resolver_check(self) < 0) return NULL;
  if (hs_resolver_define_code(self->s, key) < 0) return PyErr_NoMemory();
  Py_RETURN_NONE;
}

/* The namer of hs_resolver_resolve: a Python callable namer(kind, a, b) -> int. */
static int64_t call_namer(void *ctx, int kind, uint64_t a, int64_t b) {
  PyObject *r = PyObject_CallFunction((PyObject *)ctx, "iKL", kind, (unsigned long long)a, (long long)b);
  if (!r) return -1;
  long long v = PyLong_AsLongLong(r);
  Py_DECREF(r);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v == 0 && kind == HS_NAME_PC) return 0; /* not now: the stack waits */
  if ((v & 0xffffffffll) <= 0 || (v & 0xffffffffll) >= 0x80000000ll || (v >> 32) & ~3ll) {
    PyErr_Format(PyExc_ValueError, "namer returned %lld: not a frame id (1 to 2^31 - 1) with flags", v);
    return -1;
  }
  return (int64_t)v;
}

static PyObject *Resolver_resolve(ResolverObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"trie", "tracker", "namer", "eval_lo", "eval_hi", "interp_start", "interp_end", "wait",
                           "retry_parked", NULL};
  PyObject *trie, *tracker, *namer;
  unsigned long long lo, hi, istart, iend;
  int wait, retry = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!OKKKKp|p:resolve", kwlist, &TrieType, &trie, &TrackerType,
                                   &tracker, &namer, &lo, &hi, &istart, &iend, &wait, &retry))
    return NULL;
  TrackerObject *tr = (TrackerObject *)tracker;
  if (resolver_check(self) < 0 || tracker_check(tr) < 0) return NULL;
  struct hs_splice sp = {lo, hi, istart, iend, wait, retry};
  uint64_t unplaced = 0;
  /* The namer runs Python: no other thread may use either meanwhile. */
  self->busy = tr->busy = 1;
  int64_t n = hs_resolver_resolve(self->s, &((TrieObject *)trie)->t, tr->t, &sp, call_namer, namer, &unplaced);
  self->busy = tr->busy = 0;
  if (n == -1) return NULL;
  if (n < 0) return PyErr_NoMemory();
  return Py_BuildValue("(LK)", (long long)n, (unsigned long long)unplaced);
}

static PyObject *Resolver_frames(ResolverObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"stack_id", "namer", "eval_lo", "eval_hi", "interp_start", "interp_end", NULL};
  PyObject *namer;
  unsigned long long stack_id, lo, hi, istart, iend;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "KOKKKK:frames", kwlist, &stack_id, &namer, &lo, &hi, &istart,
                                   &iend))
    return NULL;
  if (resolver_check(self) < 0) return NULL;
  struct hs_splice sp = {lo, hi, istart, iend, 0, 0};
  self->busy = 1; /* the namer runs Python */
  int64_t n = hs_resolver_frames(self->s, stack_id, &sp, call_namer, namer);
  self->busy = 0;
  if (n == -3) Py_RETURN_NONE;
  if (n == -1) return NULL;
  if (n < 0) return PyErr_NoMemory();
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (int64_t i = 0; list && i < n; i++) {
    PyObject *v = PyLong_FromUnsignedLong(self->s->path[i]);
    if (!v) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  return list;
}

static PyObject *Resolver_forget_pcs(ResolverObject *self, PyObject *Py_UNUSED(ignored)) {
  if (resolver_check(self) < 0) return NULL;
  hs_resolver_forget_pcs(self->s);
  Py_RETURN_NONE;
}

static PyObject *Resolver_callsite(ResolverObject *self, PyObject *arg) {
  unsigned long long stack_id = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (resolver_check(self) < 0) return NULL;
  return PyLong_FromLongLong(hs_resolver_callsite(self->s, stack_id));
}

static PyObject *Resolver_sample_values(ResolverObject *self, PyObject *args) {
  Py_buffer b;
  unsigned long long not_freed;
  if (!PyArg_ParseTuple(args, "y*K:sample_values", &b, &not_freed)) return NULL;
  PyObject *out = resolver_check(self) < 0 ? NULL : hs_sample_values(b.buf, b.len, not_freed, self->s);
  PyBuffer_Release(&b);
  return out;
}

static PyObject *Resolver_bind(ResolverObject *self, PyObject *arg) {
  if (!PyObject_TypeCheck(arg, &TrackerType)) {
    PyErr_SetString(PyExc_TypeError, "bind() takes a Tracker");
    return NULL;
  }
  TrackerObject *other = (TrackerObject *)arg;
  if (resolver_check(self) < 0 || tracker_check(other) < 0) return NULL;
  int64_t n = hs_tracker_unresolved(other->t);
  if (n < 0) return PyErr_NoMemory();
  /* Copied: set_callsite may reuse the tracker's output buffer. */
  uint64_t *ids = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof *ids);
  if (!ids) return PyErr_NoMemory();
  memcpy(ids, other->t->out.p, (size_t)n * sizeof *ids);
  PyObject *left = PyList_New(0);
  for (int64_t i = 0; left && i < n; i++) {
    int64_t cs = hs_resolver_callsite(self->s, ids[i]);
    if (cs > 0) {
      if (hs_tracker_set_callsite(other->t, ids[i], (uint64_t)cs) < 0) {
        Py_CLEAR(left);
        PyErr_NoMemory();
      }
      continue;
    }
    PyObject *v = PyLong_FromUnsignedLongLong(ids[i]);
    if (!v || PyList_Append(left, v) < 0) Py_CLEAR(left);
    Py_XDECREF(v);
  }
  PyMem_RawFree(ids);
  return left;
}

static PyObject *Resolver_waiting(ResolverObject *self, PyObject *Py_UNUSED(ignored)) {
  if (resolver_check(self) < 0) return NULL;
  const struct hs_resolver *r = self->s;
  const struct hs_u64s *lists[3] = {&r->parked, &r->native, &r->python};
  size_t total = r->parked.len + r->native.len + r->python.len;
  PyObject *list = PyList_New((Py_ssize_t)total);
  for (size_t i = 0, l = 0, k = 0; list && i < total; i++, k++) {
    while (k >= lists[l]->len) {
      l++;
      k = 0;
    }
    PyObject *v = PyLong_FromUnsignedLongLong(lists[l]->p[k]);
    if (!v) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  return list;
}

static PyMethodDef Resolver_methods[] = {
    {"keep", (PyCFunction)Resolver_keep, METH_O,
     "keep(record) -> None\n--\n\nKeep one whole STACK record, as the ring reader does with those it reads."},
    {"held_stack", (PyCFunction)Resolver_held_stack, METH_O,
     "held_stack(stack_id) -> bytes | None\n--\n\nThe kept STACK record of stack_id, whole; None if none is kept."},
    {"define_code", (PyCFunction)Resolver_define_code, METH_O,
     "define_code(key) -> None\n--\n\nA Python code object of this process was received."},
    {"resolve", (PyCFunction)(void (*)(void))Resolver_resolve, METH_VARARGS | METH_KEYWORDS,
     "resolve(trie, tracker, namer, eval_lo, eval_hi, interp_start, interp_end, wait, retry_parked=True)"
     " -> tuple[int, int]\n--\n\n"
     "Resolve the waiting stacks; (how many, Python frames put at the root)."},
    {"frames", (PyCFunction)(void (*)(void))Resolver_frames, METH_VARARGS | METH_KEYWORDS,
     "frames(stack_id, namer, eval_lo, eval_hi, interp_start, interp_end) -> list[int] | None\n--\n\n"
     "A kept stack's frames as a resolve would give them, root first, without resolving it; None if not kept."},
    {"forget_pcs", (PyCFunction)Resolver_forget_pcs, METH_NOARGS,
     "forget_pcs() -> None\n--\n\nForget the frames named for pcs (another object is where one was)."},
    {"callsite", (PyCFunction)Resolver_callsite, METH_O,
     "callsite(stack_id) -> int\n--\n\nThe callsite of a resolved stack, 0 when none."},
    {"sample_values", (PyCFunction)Resolver_sample_values, METH_VARARGS,
     "sample_values(rows, not_freed) -> list\n--\n\nSAMPLE_ROW rows as the store's memory-sample rows, flat."},
    {"bind", (PyCFunction)Resolver_bind, METH_O,
     "bind(tracker) -> list[int]\n--\n\nGive tracker's unresolved stacks their callsites; the ids left."},
    {"waiting", (PyCFunction)Resolver_waiting, METH_NOARGS,
     "waiting() -> list[int]\n--\n\nIds of the stacks kept and not resolved yet, in the order they resolve."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ResolverType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "heapscope.bookkeeping._native.Resolver",
    .tp_basicsize = sizeof(ResolverObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Resolver()\n--\n\nOne process's stacks: kept as records until resolved to callsites.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Resolver_init,
    .tp_dealloc = (destructor)Resolver_dealloc,
    .tp_methods = Resolver_methods,
};

/* ---- Python line tables (pylines.c) ---- */

static PyObject *native_addr2line(PyObject *self, PyObject *args) {
  (void)self;
  int fmt;
  Py_buffer table;
  long long first_line, offset;
  if (!PyArg_ParseTuple(args, "iy*LL:addr2line", &fmt, &table, &first_line, &offset)) return NULL;
  int64_t line = 0;
  int rc = hs_pyline(fmt, (const uint8_t *)table.buf, (size_t)table.len, first_line, offset, &line);
  PyBuffer_Release(&table);
  if (rc < 0) return PyErr_Format(PyExc_ValueError, "unknown line table format %d", fmt);
  if (rc == 0) Py_RETURN_NONE;
  return PyLong_FromLongLong(line);
}

static PyMethodDef native_functions[] = {
    {"lifetime_values", hs_native_lifetime_values, METH_VARARGS,
     "lifetime_values(rows, kinds, life, sizes, size_kind) -> (lifetimes, sizes): LIFETIME_ROW rows as"
     " the store's lifetime and size rows, each table's in one flat list (bookkeeping/dump.py)"},
    {"addr2line", native_addr2line, METH_VARARGS,
     "addr2line(fmt, table, first_line, offset) -> int | None: the line of the instruction at byte"
     " `offset` of a CPython line table (bookkeeping/pylines.py); None when it has none"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "The bookkeeping's C state: the heap tracker, the callsite trie, the stacks and their resolve.",
    .m_size = -1,
    .m_methods = native_functions,
};

PyMODINIT_FUNC PyInit__native(void) {
  if (PyType_Ready(&TrackerType) < 0 || PyType_Ready(&ResolverType) < 0 || PyType_Ready(&TrieType) < 0) return NULL;
  PyObject *m = PyModule_Create(&native_module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Tracker", (PyObject *)&TrackerType) < 0 ||
      PyModule_AddObjectRef(m, "Resolver", (PyObject *)&ResolverType) < 0 ||
      PyModule_AddObjectRef(m, "Trie", (PyObject *)&TrieType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
