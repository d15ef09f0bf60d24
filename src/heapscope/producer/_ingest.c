/*
 * _ingest.c: the Python face of the ring reader and of the heap tracker
 * (heapscope.producer._ingest; the interface is in _ingest.pyi).
 *
 *   Tracker   one process's heap bookkeeping (bookkeeping/tracker.h): ops
 *             in, rows out. Usable alone, as the unit tests do.
 *   Ingest    one mapping of one process's ring (ingest_core.h), feeding
 *             the Tracker it made (Ingest.tracker).
 *
 * Every row crosses as packed bytes of the structs of tracker.h, mirrored in
 * bookkeeping/rows.py. Ingest.drain() releases the GIL for the pure-C part,
 * so both objects carry a `busy` flag: another thread calling into either
 * meanwhile gets RuntimeError instead of racing the loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "ingest_core.h"
#include "pylines.h"
#include "tracker.h"

static const char BUSY[] = "Ingest.drain() is running in another thread";

/* ---- Tracker ---- */

typedef struct {
  PyObject_HEAD
  struct hs_tracker *t; /* NULL when closed or not initialised */
  int busy;
} TrackerObject;

static void tracker_release(TrackerObject *self) {
  if (self->t) {
    hs_tracker_destroy(self->t);
    PyMem_RawFree(self->t);
    self->t = NULL;
  }
}

/* 0 when self may be used now; else an exception is set. A tracker sharing
 * its peak (Tracker.share_peak) is busy while any tracker of that peak is. */
static int tracker_check(TrackerObject *self) {
  if (!self->t) {
    PyErr_SetString(PyExc_ValueError, "Tracker is closed");
    return -1;
  }
  if (self->busy || self->t->pk->busy) {
    PyErr_SetString(PyExc_RuntimeError, BUSY);
    return -1;
  }
  return 0;
}

/* MemoryError if the tracker dropped something since the last call. */
static PyObject *tracker_oom(struct hs_tracker *t, PyObject *result) {
  if (t->oom) {
    t->oom = 0;
    Py_XDECREF(result);
    return PyErr_NoMemory();
  }
  return result;
}

static int Tracker_init(TrackerObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"stream", "dump_at_max", "threads", NULL};
  int stream = 0, dump_at_max = 0, threads = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$ppp:Tracker", kwlist, &stream, &dump_at_max, &threads))
    return -1;
  if (self->busy || (self->t && self->t->pk->busy)) {
    PyErr_SetString(PyExc_RuntimeError, BUSY);
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
  unsigned int tid = 0;
  if (!PyArg_ParseTuple(args, "KKKKKKK|I:malloc", &seq, &addr, &alloc_size, &sample_size, &stack_id, &ts,
                        &now_ns, &tid))
    return NULL;
  if (tracker_check(self) < 0) return NULL;
  hs_tracker_malloc(self->t, seq, addr, alloc_size, sample_size, stack_id, ts, (uint32_t)tid, now_ns);
  return tracker_oom(self->t, Py_NewRef(Py_None));
}

static PyObject *Tracker_free(TrackerObject *self, PyObject *args) {
  unsigned long long seq, addr, now_ns;
  if (!PyArg_ParseTuple(args, "KKK:free", &seq, &addr, &now_ns)) return NULL;
  if (tracker_check(self) < 0) return NULL;
  hs_tracker_free(self->t, seq, addr, now_ns);
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
    PyErr_SetString(PyExc_RuntimeError, BUSY);
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
    .tp_name = "heapscope.producer._ingest.Tracker",
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
    .tp_name = "heapscope.producer._ingest.Trie",
    .tp_basicsize = sizeof(TrieObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trie()\n--\n\nThe callsite trie shared by every process of a recording (bookkeeping/trie.py).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Trie_dealloc,
    .tp_methods = Trie_methods,
    .tp_as_sequence = &Trie_as_sequence,
};

/* ---- Ingest ---- */

typedef struct {
  PyObject_HEAD
  struct hs_ingest *g; /* NULL when closed or not initialised */
  TrackerObject *tracker;
  void *map;
  size_t map_size;
  TrackerObject *routed[HS_INGEST_MAX_ROUTES]; /* the trackers of g->routes, by index */
} IngestObject;

static void ingest_release(IngestObject *self) {
  if (self->g) {
    hs_ingest_destroy(self->g);
    PyMem_RawFree(self->g);
    self->g = NULL;
  }
  if (self->map) {
    munmap(self->map, self->map_size);
    self->map = NULL;
  }
}

static int ingest_check(IngestObject *self) {
  if (!self->g) {
    PyErr_SetString(PyExc_ValueError, "Ingest is closed");
    return -1;
  }
  return tracker_check(self->tracker);
}

static int Ingest_init(IngestObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"fd", "ring_size", "stream", "dump_at_max", "threads", NULL};
  int fd, stream = 0, dump_at_max = 0, threads = 0;
  Py_ssize_t ring_size;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "in|$ppp:Ingest", kwlist, &fd, &ring_size, &stream,
                                   &dump_at_max, &threads))
    return -1;
  if (self->tracker && self->tracker->busy) {
    PyErr_SetString(PyExc_RuntimeError, BUSY);
    return -1;
  }
  ingest_release(self);
  /* Up to the protocol's HS_RING_MAX_SIZE; smaller than its HS_RING_MIN_SIZE too
   * (down to 64 bytes), so tests and the fuzz harness can wrap a ring in a few records. */
  if (ring_size < 64 || (uint64_t)ring_size > HS_RING_MAX_SIZE || (ring_size & (ring_size - 1)) != 0) {
    PyErr_Format(PyExc_ValueError, "ring_size must be a power of two from 64 to %llu, not %zd",
                 (unsigned long long)HS_RING_MAX_SIZE, ring_size);
    return -1;
  }
  size_t map_size = (size_t)HS_META_SIZE + (size_t)ring_size;
  struct stat st;
  if (fstat(fd, &st) < 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  /* Touching a page past the end of the file would be SIGBUS. */
  if (st.st_size < 0 || (uint64_t)st.st_size < map_size) {
    PyErr_Format(PyExc_ValueError, "shared memory holds %lld bytes, the ring needs %zu",
                 (long long)st.st_size, map_size);
    return -1;
  }
  PyObject *tracker = PyObject_CallFunction((PyObject *)&TrackerType, NULL);
  if (!tracker) return -1;
  TrackerObject *tr = (TrackerObject *)tracker;
  tr->t->stream = stream;
  tr->t->dump_at_max = dump_at_max;
  if (threads && hs_tracker_keep_threads(tr->t) < 0) {
    Py_DECREF(tracker);
    PyErr_NoMemory();
    return -1;
  }
  void *map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    Py_DECREF(tracker);
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  uint64_t meta_ring_size = __atomic_load_n(&((struct hs_ring_meta *)map)->ring_size, __ATOMIC_RELAXED);
  if (meta_ring_size != (uint64_t)ring_size) {
    munmap(map, map_size);
    Py_DECREF(tracker);
    PyErr_Format(PyExc_ValueError, "ring meta says ring_size %llu, expected %zd",
                 (unsigned long long)meta_ring_size, ring_size);
    return -1;
  }
  struct hs_ingest *g = PyMem_RawMalloc(sizeof *g);
  if (!g) {
    munmap(map, map_size);
    Py_DECREF(tracker);
    PyErr_NoMemory();
    return -1;
  }
  hs_ingest_init(g, map, (uint64_t)ring_size, tr->t);
  Py_XSETREF(self->tracker, tr);
  self->g = g;
  self->map = map;
  self->map_size = map_size;
  return 0;
}

static void Ingest_dealloc(IngestObject *self) {
  ingest_release(self);
  Py_CLEAR(self->tracker);
  for (int i = 0; i < HS_INGEST_MAX_ROUTES; i++) Py_CLEAR(self->routed[i]);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Ingest_drain(IngestObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"now_ns", "max_records", NULL};
  PyObject *now_obj, *max_obj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:drain", kwlist, &now_obj, &max_obj)) return NULL;
  unsigned long long now_ns = PyLong_AsUnsignedLongLong(now_obj), max_records = 0;
  if (PyErr_Occurred()) return NULL;
  if (max_obj) {
    max_records = PyLong_AsUnsignedLongLong(max_obj);
    if (PyErr_Occurred()) return NULL;
  }
  if (ingest_check(self) < 0) return NULL;
  struct hs_ingest *g = self->g;

  /* A routed tracker sharing the malloc tracker's peak is busy with it: not usable alone while
   * tracker_check refuses both (the peak's busy count). A tracker sharing the peak of one in use
   * elsewhere is not routed meanwhile: its records go to Python. */
  self->tracker->busy = 1;
  self->tracker->t->pk->busy++;
  for (uint32_t i = 0; i < g->nroutes; i++) {
    TrackerObject *tr = self->routed[i];
    g->routes[i].tracker = tr && tr->t && !tr->busy && (!tr->t->pk->busy || tr->t->pk == g->tracker->pk)
                               ? tr->t : NULL; /* closed: its records go to Python */
    if (g->routes[i].tracker) {
      tr->busy = 1;
      tr->t->pk->busy++;
    }
  }
  Py_BEGIN_ALLOW_THREADS
  hs_ingest_drain(g, max_records, now_ns);
  Py_END_ALLOW_THREADS
  self->tracker->busy = 0;
  self->tracker->t->pk->busy--;
  for (uint32_t i = 0; i < g->nroutes; i++) {
    if (g->routes[i].tracker) {
      self->routed[i]->busy = 0;
      g->routes[i].tracker->pk->busy--;
    }
    g->routes[i].tracker = NULL;
  }

  PyObject *list = PyList_New((Py_ssize_t)g->records_count);
  if (!list) return NULL;
  size_t off = 0;
  for (size_t i = 0; i < g->records_count; i++) {
    uint64_t hdr;
    memcpy(&hdr, g->records.p + off, sizeof hdr);
    uint32_t size = HS_RECORD_SIZE(hdr);
    PyObject *rec = PyBytes_FromStringAndSize((const char *)g->records.p + off, size);
    if (!rec) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, rec);
    off += size;
  }
  if (g->oom) {
    g->oom = 0;
    Py_DECREF(list);
    return PyErr_NoMemory();
  }
  for (uint32_t i = 0; i < g->nroutes; i++) { /* as the malloc heap's tracker, below */
    TrackerObject *tr = self->routed[i];
    if (tr && tr->t && tr->t->oom) return tracker_oom(tr->t, list);
  }
  return tracker_oom(g->tracker, list);
}

static PyObject *Ingest_stats(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  const struct hs_ingest *g = self->g;
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  if (put_stat(d, "records", g->st.records) < 0 || put_stat(d, "mallocs", g->st.mallocs) < 0 ||
      put_stat(d, "frees", g->st.frees) < 0 || put_stat(d, "pads", g->st.pads) < 0 ||
      put_stat(d, "malformed_records", g->st.malformed_records) < 0 ||
      put_stat(d, "held_stacks", g->st.held_stacks) < 0 ||
      put_stat(d, "corrupt", (uint64_t)g->corrupt) < 0 || tracker_stats_into(g->tracker, d) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

static PyObject *Ingest_route(IngestObject *self, PyObject *args) {
  unsigned int heap_id;
  PyObject *tracker;
  if (!PyArg_ParseTuple(args, "IO!:route", &heap_id, &TrackerType, &tracker)) return NULL;
  if (ingest_check(self) < 0) return NULL;
  if ((TrackerObject *)tracker == self->tracker) {
    PyErr_SetString(PyExc_ValueError, "the malloc heap's tracker cannot take a custom heap's records");
    return NULL;
  }
  struct hs_ingest_route *r = hs_ingest_route(self->g, heap_id);
  if (!r) Py_RETURN_FALSE;
  Py_XSETREF(self->routed[r - self->g->routes], (TrackerObject *)Py_NewRef(tracker));
  Py_RETURN_TRUE;
}

static PyObject *Ingest_routed(IngestObject *self, PyObject *arg) {
  unsigned long heap_id = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (ingest_check(self) < 0) return NULL;
  for (uint32_t i = 0; i < self->g->nroutes; i++)
    if (self->g->routes[i].heap_id == heap_id)
      return Py_BuildValue("(KK)", (unsigned long long)self->g->routes[i].mallocs,
                           (unsigned long long)self->g->routes[i].frees);
  return Py_BuildValue("(ii)", 0, 0);
}

static PyObject *Ingest_hold_stacks(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  self->g->hold_stacks = 1;
  Py_RETURN_NONE;
}

static PyObject *Ingest_held_stack(IngestObject *self, PyObject *arg) {
  unsigned long long stack_id = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (ingest_check(self) < 0) return NULL;
  uint32_t size = 0;
  const uint8_t *rec = hs_ingest_held_stack(self->g, stack_id, &size);
  if (!rec) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize((const char *)rec, size);
}

static PyObject *Ingest_resolve_stacks(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  if (self->g->st.records || self->g->hold_stacks) {
    PyErr_SetString(PyExc_ValueError, "resolve_stacks() comes before the first drain, and not with hold_stacks()");
    return NULL;
  }
  self->g->resolve_stacks = 1;
  Py_RETURN_NONE;
}

static PyObject *Ingest_define_code(IngestObject *self, PyObject *arg) {
  unsigned long long key = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (ingest_check(self) < 0) return NULL;
  if (hs_map_put(&self->g->res.codes, key, 0, 1) < 0) return PyErr_NoMemory();
  Py_RETURN_NONE;
}

/* The namer of hs_ingest_resolve: a Python callable namer(kind, a, b) -> int. */
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

static PyObject *Ingest_resolve(IngestObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"trie", "namer", "eval_lo", "eval_hi", "interp_start", "interp_end", "wait",
                           "retry_parked", NULL};
  PyObject *trie, *namer;
  unsigned long long lo, hi, istart, iend;
  int wait, retry = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OKKKKp|p:resolve", kwlist, &TrieType, &trie, &namer, &lo, &hi,
                                   &istart, &iend, &wait, &retry))
    return NULL;
  if (ingest_check(self) < 0) return NULL;
  struct hs_splice sp = {lo, hi, istart, iend, wait, retry};
  uint64_t unplaced = 0;
  self->tracker->busy = 1; /* the namer runs Python: no other thread may use the tracker meanwhile */
  int64_t n = hs_ingest_resolve(self->g, &((TrieObject *)trie)->t, &sp, call_namer, namer, &unplaced);
  self->tracker->busy = 0;
  if (n == -1) return NULL;
  if (n < 0) return PyErr_NoMemory();
  return Py_BuildValue("(LK)", (long long)n, (unsigned long long)unplaced);
}

static PyObject *Ingest_callsite(IngestObject *self, PyObject *arg) {
  unsigned long long stack_id = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (ingest_check(self) < 0) return NULL;
  return PyLong_FromLongLong(hs_ingest_callsite(self->g, stack_id));
}

static PyObject *Ingest_bind(IngestObject *self, PyObject *arg) {
  if (!PyObject_TypeCheck(arg, &TrackerType)) {
    PyErr_SetString(PyExc_TypeError, "bind() takes a Tracker");
    return NULL;
  }
  TrackerObject *other = (TrackerObject *)arg;
  if (ingest_check(self) < 0 || tracker_check(other) < 0) return NULL;
  int64_t n = hs_tracker_unresolved(other->t);
  if (n < 0) return PyErr_NoMemory();
  /* Copied: set_callsite may reuse the tracker's output buffer. */
  uint64_t *ids = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof *ids);
  if (!ids) return PyErr_NoMemory();
  memcpy(ids, other->t->out.p, (size_t)n * sizeof *ids);
  PyObject *left = PyList_New(0);
  for (int64_t i = 0; left && i < n; i++) {
    int64_t cs = hs_ingest_callsite(self->g, ids[i]);
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

static PyObject *Ingest_waiting(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  const struct hs_resolver *r = &self->g->res;
  const struct hs_u64s *lists[3] = {&r->parked, &r->native, &r->python};
  size_t total = r->parked.len + r->native.len + r->python.len;
  PyObject *list = PyList_New((Py_ssize_t)total);
  for (size_t i = 0, l = 0, k = 0; list && i < total; i++, k++) {
    while (k >= lists[l]->len) {
      l++;
      k = 0;
    }
    uint64_t id = lists[l]->p[k];
    PyObject *v = PyLong_FromUnsignedLongLong(id);
    if (!v) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  return list;
}

static PyObject *Ingest_close(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->tracker && self->tracker->busy) {
    PyErr_SetString(PyExc_RuntimeError, BUSY);
    return NULL;
  }
  ingest_release(self);
  if (self->tracker) tracker_release(self->tracker);
  Py_RETURN_NONE;
}

static PyObject *Ingest_get_tracker(IngestObject *self, void *Py_UNUSED(closure)) {
  if (!self->tracker) {
    PyErr_SetString(PyExc_ValueError, "Ingest is not initialised");
    return NULL;
  }
  return Py_NewRef((PyObject *)self->tracker);
}

static PyMethodDef Ingest_methods[] = {
    {"drain", (PyCFunction)(void (*)(void))Ingest_drain, METH_VARARGS | METH_KEYWORDS,
     "drain(now_ns, max_records=0) -> list[bytes]\n--\n\n"
     "Read committed records; MALLOC/FREE go to the tracker; return STACK/MODULE/HEAP records whole."},
    {"hold_stacks", (PyCFunction)Ingest_hold_stacks, METH_NOARGS,
     "hold_stacks() -> None\n--\n\nFrom now on keep STACK records here (held_stack) instead of returning them."},
    {"held_stack", (PyCFunction)Ingest_held_stack, METH_O,
     "held_stack(stack_id) -> bytes | None\n--\n\nThe held STACK record of stack_id, whole; None if none is held."},
    {"stats", (PyCFunction)Ingest_stats, METH_NOARGS,
     "stats() -> dict[str, int]\n--\n\nThe reader's counters and the tracker's."},
    {"resolve_stacks", (PyCFunction)Ingest_resolve_stacks, METH_NOARGS,
     "resolve_stacks() -> None\n--\n\nKeep STACK records here, to be resolved by resolve()."},
    {"define_code", (PyCFunction)Ingest_define_code, METH_O,
     "define_code(key) -> None\n--\n\nA Python code object of this process was received."},
    {"resolve", (PyCFunction)(void (*)(void))Ingest_resolve, METH_VARARGS | METH_KEYWORDS,
     "resolve(trie, namer, eval_lo, eval_hi, interp_start, interp_end, wait, retry_parked=True)"
     " -> tuple[int, int]\n--\n\n"
     "Resolve the waiting stacks; (how many, Python frames put at the root)."},
    {"callsite", (PyCFunction)Ingest_callsite, METH_O,
     "callsite(stack_id) -> int\n--\n\nThe callsite of a resolved stack, 0 when none."},
    {"bind", (PyCFunction)Ingest_bind, METH_O,
     "bind(tracker) -> list[int]\n--\n\nGive tracker's unresolved stacks their callsites; the ids left."},
    {"waiting", (PyCFunction)Ingest_waiting, METH_NOARGS,
     "waiting() -> list[int]\n--\n\nIds of the stacks kept and not resolved yet, in the order they resolve."},
    {"route", (PyCFunction)Ingest_route, METH_VARARGS,
     "route(heap_id, tracker) -> bool\n--\n\n"
     "From the next drain on, HEAP_MALLOC/HEAP_FREE records of heap_id go to tracker here, not to Python;\n"
     "False when every route is taken (they keep going to Python)."},
    {"routed", (PyCFunction)Ingest_routed, METH_O,
     "routed(heap_id) -> tuple[int, int]\n--\n\nThe HEAP_MALLOC and HEAP_FREE records of heap_id applied by routing."},
    {"close", (PyCFunction)Ingest_close, METH_NOARGS,
     "close() -> None\n--\n\nUnmap the ring and close the tracker; idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ingest_getset[] = {
    {"tracker", (getter)Ingest_get_tracker, NULL, "The Tracker the ring's ops go to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject IngestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "heapscope.producer._ingest.Ingest",
    .tp_basicsize = sizeof(IngestObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ingest(fd, ring_size, *, stream=False, dump_at_max=False, threads=False)\n--\n\n"
              "Reads one process's shared ring into a Tracker of its own.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ingest_init,
    .tp_dealloc = (destructor)Ingest_dealloc,
    .tp_methods = Ingest_methods,
    .tp_getset = Ingest_getset,
};

/* ---- Python line tables (bookkeeping/pylines.c) ---- */

static PyObject *ingest_addr2line(PyObject *self, PyObject *args) {
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

static PyMethodDef ingest_functions[] = {
    {"addr2line", ingest_addr2line, METH_VARARGS,
     "addr2line(fmt, table, first_line, offset) -> int | None: the line of the instruction at byte"
     " `offset` of a CPython line table (bookkeeping/pylines.py); None when it has none"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ingest_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_ingest",
    .m_doc = "The producer's ring reader (Ingest) and the heap tracker it feeds (Tracker).",
    .m_size = -1,
    .m_methods = ingest_functions,
};

PyMODINIT_FUNC PyInit__ingest(void) {
  if (PyType_Ready(&TrackerType) < 0 || PyType_Ready(&IngestType) < 0 || PyType_Ready(&TrieType) < 0) return NULL;
  PyObject *m = PyModule_Create(&ingest_module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Tracker", (PyObject *)&TrackerType) < 0 ||
      PyModule_AddObjectRef(m, "Ingest", (PyObject *)&IngestType) < 0 ||
      PyModule_AddObjectRef(m, "Trie", (PyObject *)&TrieType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
