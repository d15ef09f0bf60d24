/*
 * _ingest.c: the Python face of the ingest loop (heapscope.producer._ingest).
 *
 * The Python producer keeps the rare work (handshake, stacks, modules,
 * dumps); this extension owns the per-record loop of ingest_core.c. One
 * Ingest object per traced process wraps one mapping of its ring. drain()
 * releases the GIL for the pure-C part, so the object carries a `busy` flag:
 * a second thread calling into it meanwhile gets RuntimeError instead of
 * racing the loop. The interface is in _ingest.pyi.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "ingest_core.h"

typedef struct {
  PyObject_HEAD
  struct hs_ingest *g; /* NULL when closed or not initialised */
  void *map;
  size_t map_size;
  int busy;
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

/* 0 when self may be used now; else an exception is set. */
static int ingest_check(IngestObject *self) {
  if (!self->g) {
    PyErr_SetString(PyExc_ValueError, "Ingest is closed");
    return -1;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Ingest.drain() is running in another thread");
    return -1;
  }
  return 0;
}

static int Ingest_init(IngestObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"fd", "ring_size", "stream", "dump_at_max", NULL};
  int fd, stream = 0, dump_at_max = 0;
  Py_ssize_t ring_size;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "in|$pp:Ingest", kwlist, &fd, &ring_size, &stream,
                                   &dump_at_max))
    return -1;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Ingest.drain() is running in another thread");
    return -1;
  }
  ingest_release(self);
  if (ring_size < 8 || (ring_size & (ring_size - 1)) != 0) {
    PyErr_Format(PyExc_ValueError, "ring_size must be a power of two >= 8, not %zd", ring_size);
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
  void *map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  uint64_t meta_ring_size = __atomic_load_n(&((struct hs_ring_meta *)map)->ring_size, __ATOMIC_RELAXED);
  if (meta_ring_size != (uint64_t)ring_size) {
    munmap(map, map_size);
    PyErr_Format(PyExc_ValueError, "ring meta says ring_size %llu, expected %zd",
                 (unsigned long long)meta_ring_size, ring_size);
    return -1;
  }
  struct hs_ingest *g = PyMem_RawMalloc(sizeof *g);
  if (!g || hs_ingest_init(g, map, (uint64_t)ring_size, stream, dump_at_max) < 0) {
    PyMem_RawFree(g);
    munmap(map, map_size);
    PyErr_NoMemory();
    return -1;
  }
  self->g = g;
  self->map = map;
  self->map_size = map_size;
  return 0;
}

static void Ingest_dealloc(IngestObject *self) {
  ingest_release(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Ingest_drain(IngestObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"max_records", NULL};
  unsigned long long max_records = 0;
  PyObject *max_obj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:drain", kwlist, &max_obj)) return NULL;
  if (max_obj) {
    max_records = PyLong_AsUnsignedLongLong(max_obj);
    if (PyErr_Occurred()) return NULL;
  }
  if (ingest_check(self) < 0) return NULL;
  struct hs_ingest *g = self->g;

  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  hs_ingest_drain(g, max_records);
  Py_END_ALLOW_THREADS
  self->busy = 0;

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
  return list;
}

static PyObject *Ingest_flush(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  hs_ingest_flush(self->g);
  if (self->g->oom) {
    self->g->oom = 0;
    return PyErr_NoMemory();
  }
  Py_RETURN_NONE;
}

static PyObject *Ingest_totals(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  const struct hs_stacks *s = &self->g->stacks;
  return PyBytes_FromStringAndSize((const char *)s->totals,
                                   (Py_ssize_t)(s->count * sizeof(struct hs_stack_totals)));
}

static PyObject *Ingest_peak(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  const struct hs_ingest *g = self->g;
  if (!g->dump_at_max) {
    PyErr_SetString(PyExc_ValueError, "Ingest was not made with dump_at_max=True");
    return NULL;
  }
  size_t n = g->stacks.count;
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 5 * sizeof(uint64_t)));
  if (!out) return NULL;
  uint64_t *row = (uint64_t *)PyBytes_AS_STRING(out);
  for (size_t i = 0; i < n; i++, row += 5) {
    const struct hs_peak_row *p = i < g->peak_cap ? &g->peak[i] : NULL;
    row[0] = g->stacks.totals[i].stack_id;
    row[1] = p ? p->max_bytes : 0;
    row[2] = 0;
    row[3] = p ? p->max_count : 0;
    row[4] = 0;
  }
  return out;
}

static PyObject *Ingest_live(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  const struct hs_ingest *g = self->g;
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(g->live.count * 5 * sizeof(uint64_t)));
  if (!out) return NULL;
  uint64_t *row = (uint64_t *)PyBytes_AS_STRING(out);
  for (size_t i = 0; i <= g->live.mask; i++) {
    const struct hs_live *e = &g->live.slots[i];
    if (!e->used) continue;
    row[0] = e->addr;
    row[1] = e->sample_size;
    row[2] = e->alloc_size;
    row[3] = g->stacks.totals[e->stack_idx].stack_id;
    row[4] = e->seq;
    row += 5;
  }
  return out;
}

static PyObject *Ingest_take_stream(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  struct hs_buf *b = &self->g->stream_rows;
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

static PyObject *Ingest_stats(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (ingest_check(self) < 0) return NULL;
  const struct hs_ingest *g = self->g;
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  if (put_stat(d, "records", g->st.records) < 0 || put_stat(d, "mallocs", g->st.mallocs) < 0 ||
      put_stat(d, "frees", g->st.frees) < 0 || put_stat(d, "pads", g->st.pads) < 0 ||
      put_stat(d, "malformed_records", g->st.malformed_records) < 0 ||
      put_stat(d, "corrupt", (uint64_t)g->corrupt) < 0 ||
      put_stat(d, "late_records", g->st.late_records) < 0 ||
      put_stat(d, "gaps_skipped", g->st.gaps_skipped) < 0 || put_stat(d, "pending", g->pending.n) < 0 ||
      put_stat(d, "live_allocations", g->live.count) < 0 ||
      put_stat(d, "implicit_frees", g->st.implicit_frees) < 0 ||
      put_stat(d, "untracked_frees", g->st.untracked_frees) < 0 ||
      put_stat(d, "committed_seq", g->committed_seq) < 0 ||
      put_stat(d, "max_pending", g->st.max_pending) < 0 ||
      put_stat(d, "current_unfreed", g->cur_unfreed) < 0 ||
      put_stat(d, "peak_unfreed", g->max_unfreed) < 0 || put_stat(d, "peak_ts", g->max_ts) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

static PyObject *Ingest_close(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Ingest.drain() is running in another thread");
    return NULL;
  }
  ingest_release(self);
  Py_RETURN_NONE;
}

static PyObject *Ingest_get_last_ts(IngestObject *self, void *Py_UNUSED(closure)) {
  if (!self->g) {
    PyErr_SetString(PyExc_ValueError, "Ingest is closed");
    return NULL;
  }
  return PyLong_FromUnsignedLongLong(self->g->last_ts);
}

static PyMethodDef Ingest_methods[] = {
    {"drain", (PyCFunction)(void (*)(void))Ingest_drain, METH_VARARGS | METH_KEYWORDS,
     "drain(max_records=0) -> list[bytes]\n--\n\n"
     "Read committed records; apply MALLOC/FREE; return STACK/MODULE/HEAP records whole."},
    {"flush", (PyCFunction)Ingest_flush, METH_NOARGS,
     "flush() -> None\n--\n\nApply every pending op in seq order, skipping gaps."},
    {"totals", (PyCFunction)Ingest_totals, METH_NOARGS,
     "totals() -> bytes\n--\n\n"
     "5 x u64 per stack: stack_id, alloc_bytes, free_bytes, alloc_count, free_count."},
    {"peak", (PyCFunction)Ingest_peak, METH_NOARGS,
     "peak() -> bytes\n--\n\n"
     "dump_at_max: 5 x u64 per stack, like totals(), holding the state at the peak:\n"
     "stack_id, bytes unfreed at the peak, 0, allocations unfreed at the peak, 0."},
    {"live", (PyCFunction)Ingest_live, METH_NOARGS,
     "live() -> bytes\n--\n\n5 x u64 per live allocation: addr, sample_size, alloc_size, stack_id, seq."},
    {"take_stream", (PyCFunction)Ingest_take_stream, METH_NOARGS,
     "take_stream() -> bytes\n--\n\n"
     "7 x u64 per op applied since the last call: kind, seq, addr, alloc_size, sample_size, stack_id, ts."},
    {"stats", (PyCFunction)Ingest_stats, METH_NOARGS, "stats() -> dict[str, int]\n--\n\nCounters."},
    {"close", (PyCFunction)Ingest_close, METH_NOARGS, "close() -> None\n--\n\nUnmap the ring; idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ingest_getset[] = {
    {"last_ts", (getter)Ingest_get_last_ts, NULL, "Largest MALLOC ts applied so far (ns).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject IngestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "heapscope.producer._ingest.Ingest",
    .tp_basicsize = sizeof(IngestObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ingest(fd, ring_size, *, stream=False, dump_at_max=False)\n--\n\n"
              "Reads one process's shared ring and keeps its heap bookkeeping.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ingest_init,
    .tp_dealloc = (destructor)Ingest_dealloc,
    .tp_methods = Ingest_methods,
    .tp_getset = Ingest_getset,
};

static struct PyModuleDef ingest_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_ingest",
    .m_doc = "The producer's per-record loop: ring reading, seq ordering, heap bookkeeping.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__ingest(void) {
  if (PyType_Ready(&IngestType) < 0) return NULL;
  PyObject *m = PyModule_Create(&ingest_module);
  if (!m) return NULL;
  Py_INCREF(&IngestType);
  if (PyModule_AddObject(m, "Ingest", (PyObject *)&IngestType) < 0) {
    Py_DECREF(&IngestType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
