/*
 * _ingest.c: the Python face of the producer's ring reader
 * (heapscope.producer._ingest; the interface is in _ingest.pyi).
 *
 *   Ingest    one mapping of one process's ring (ingest_core.h): its MALLOC
 *             and FREE records go to the process's Tracker, its STACK
 *             records to the process's Resolver (both made here, of
 *             heapscope.bookkeeping._native: native.h), the rare others
 *             back to Python whole.
 *
 * Ingest.drain() releases the GIL for the pure-C part; the Tracker and the
 * Resolver are marked busy meanwhile (native.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "ingest_core.h"
#include "native.h"

/* heapscope.bookkeeping._native's types, looked up when this module is imported. */
static PyTypeObject *TrackerType, *ResolverType;

/* ---- the TSC clock (wire.h HS_CFG_TSC; ingest_core.h struct hs_tsc_cal) ----
 * One calibration for the process, changed with the GIL held only; each Ingest takes a copy
 * before it drains without the GIL. */
static struct hs_tsc_cal tsc_cal;

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#if defined(__x86_64__)
#define HAVE_TSC 1
static uint64_t read_tsc(void) { return __builtin_ia32_rdtsc(); }
#else
#define HAVE_TSC 0
static uint64_t read_tsc(void) { return 0; }
#endif

/* The anchor: both clocks now (tsc_start, before any client stamps with the TSC). */
static void tsc_anchor(void) {
  tsc_cal.tsc0 = read_tsc();
  tsc_cal.ns0 = mono_ns();
  tsc_cal.ns_per_tick = 0;
}

/* The rate from the anchor to now, over at least 1 ms (waited for once, at the first drain
 * of a producer answered within 1 ms of its anchor). */
static void tsc_refresh(void) {
  if (tsc_cal.tsc0 == 0) tsc_anchor();
  uint64_t tsc, ns;
  do {
    tsc = read_tsc();
    ns = mono_ns();
  } while (ns - tsc_cal.ns0 < 1000000u);
  if (tsc > tsc_cal.tsc0) tsc_cal.ns_per_tick = (double)(ns - tsc_cal.ns0) / (double)(tsc - tsc_cal.tsc0);
}

static void tsc_missing(void) { PyErr_SetString(PyExc_ValueError, "no time-stamp counter on this architecture"); }

static PyObject *tsc_start(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
  if (!HAVE_TSC) return tsc_missing(), NULL;
  tsc_anchor();
  return PyLong_FromUnsignedLongLong(tsc_cal.tsc0);
}

#define tracker_check hs_tracker_object_check
#define tracker_oom hs_tracker_object_oom

static void tracker_close(TrackerObject *tr) {
  if (tr && tr->t) Py_XDECREF(PyObject_CallMethod((PyObject *)tr, "close", NULL));
}

static int put_stat(PyObject *d, const char *key, uint64_t value) {
  PyObject *v = PyLong_FromUnsignedLongLong(value);
  if (!v) return -1;
  int r = PyDict_SetItemString(d, key, v);
  Py_DECREF(v);
  return r;
}

/* ---- Ingest ---- */

typedef struct {
  PyObject_HEAD
  struct hs_ingest *g; /* NULL when closed or not initialised */
  TrackerObject *tracker;
  ResolverObject *resolver;
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
  if (self->resolver->busy) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
    return -1;
  }
  return tracker_check(self->tracker);
}

static int Ingest_init(IngestObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"fd", "ring_size", "stream", "dump_at_max", "threads", "tsc", NULL};
  int fd, stream = 0, dump_at_max = 0, threads = 0, tsc = 0;
  Py_ssize_t ring_size;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "in|$pppp:Ingest", kwlist, &fd, &ring_size, &stream,
                                   &dump_at_max, &threads, &tsc))
    return -1;
  if (tsc && !HAVE_TSC) return tsc_missing(), -1;
  if (self->tracker && self->tracker->busy) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
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
  PyObject *tracker = PyObject_CallFunction((PyObject *)TrackerType, NULL);
  if (!tracker) return -1;
  TrackerObject *tr = (TrackerObject *)tracker;
  ResolverObject *resolver = (ResolverObject *)PyObject_CallFunction((PyObject *)ResolverType, NULL);
  if (!resolver) {
    Py_DECREF(tracker);
    return -1;
  }
  tr->t->stream = stream;
  tr->t->dump_at_max = dump_at_max;
  if (threads && hs_tracker_keep_threads(tr->t) < 0) {
    Py_DECREF(tracker);
    Py_DECREF(resolver);
    PyErr_NoMemory();
    return -1;
  }
  void *map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    Py_DECREF(tracker);
    Py_DECREF(resolver);
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  uint64_t meta_ring_size = __atomic_load_n(&((struct hs_ring_meta *)map)->ring_size, __ATOMIC_RELAXED);
  if (meta_ring_size != (uint64_t)ring_size) {
    munmap(map, map_size);
    Py_DECREF(tracker);
    Py_DECREF(resolver);
    PyErr_Format(PyExc_ValueError, "ring meta says ring_size %llu, expected %zd",
                 (unsigned long long)meta_ring_size, ring_size);
    return -1;
  }
  struct hs_ingest *g = PyMem_RawMalloc(sizeof *g);
  if (!g) {
    munmap(map, map_size);
    Py_DECREF(tracker);
    Py_DECREF(resolver);
    PyErr_NoMemory();
    return -1;
  }
  hs_ingest_init(g, map, (uint64_t)ring_size, tr->t, resolver->s);
  g->tsc = tsc;
  Py_XSETREF(self->tracker, tr);
  Py_XSETREF(self->resolver, resolver);
  self->g = g;
  self->map = map;
  self->map_size = map_size;
  return 0;
}

static void Ingest_dealloc(IngestObject *self) {
  ingest_release(self);
  Py_CLEAR(self->tracker);
  Py_CLEAR(self->resolver);
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
  self->resolver->busy = 1;
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
  if (g->tsc) {
    tsc_refresh();
    g->cal = tsc_cal;
  }
  Py_BEGIN_ALLOW_THREADS
  hs_ingest_drain(g, max_records, now_ns);
  Py_END_ALLOW_THREADS
  self->tracker->busy = 0;
  self->resolver->busy = 0;
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
      put_stat(d, "corrupt", (uint64_t)g->corrupt) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  PyObject *tracker = PyObject_CallMethod((PyObject *)self->tracker, "stats", NULL);
  if (!tracker || PyDict_Update(d, tracker) < 0) {
    Py_XDECREF(tracker);
    Py_DECREF(d);
    return NULL;
  }
  Py_DECREF(tracker);
  return d;
}

static PyObject *Ingest_route(IngestObject *self, PyObject *args) {
  unsigned int heap_id;
  PyObject *tracker;
  if (!PyArg_ParseTuple(args, "IO!:route", &heap_id, TrackerType, &tracker)) return NULL;
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

static PyObject *Ingest_close(IngestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->tracker && self->tracker->busy) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
    return NULL;
  }
  ingest_release(self);
  tracker_close(self->tracker);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

static PyObject *Ingest_get_tracker(IngestObject *self, void *Py_UNUSED(closure)) {
  if (!self->tracker) {
    PyErr_SetString(PyExc_ValueError, "Ingest is not initialised");
    return NULL;
  }
  return Py_NewRef((PyObject *)self->tracker);
}

static PyObject *Ingest_ns_of(IngestObject *self, PyObject *arg) {
  unsigned long long ts = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (ingest_check(self) < 0) return NULL;
  if (!self->g->tsc) return PyLong_FromUnsignedLongLong(ts);
  tsc_refresh();
  self->g->cal = tsc_cal;
  return PyLong_FromUnsignedLongLong(hs_tsc_ns(&self->g->cal, ts));
}

static PyMethodDef Ingest_methods[] = {
    {"ns_of", (PyCFunction)Ingest_ns_of, METH_O,
     "ns_of(ts) -> int\n--\n\nA record's ts as CLOCK_MONOTONIC ns (converted from the TSC with tsc=True)."},
    {"drain", (PyCFunction)(void (*)(void))Ingest_drain, METH_VARARGS | METH_KEYWORDS,
     "drain(now_ns, max_records=0) -> list[bytes]\n--\n\n"
     "Read committed records; MALLOC/FREE go to the tracker, STACK to the resolver; return the others whole."},
    {"stats", (PyCFunction)Ingest_stats, METH_NOARGS,
     "stats() -> dict[str, int]\n--\n\nThe reader's counters and the tracker's."},
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

static PyObject *Ingest_get_resolver(IngestObject *self, void *Py_UNUSED(closure)) {
  if (!self->resolver) {
    PyErr_SetString(PyExc_ValueError, "Ingest is not initialised");
    return NULL;
  }
  return Py_NewRef((PyObject *)self->resolver);
}

static PyGetSetDef Ingest_getset[] = {
    {"tracker", (getter)Ingest_get_tracker, NULL, "The Tracker the ring's ops go to.", NULL},
    {"resolver", (getter)Ingest_get_resolver, NULL, "The Resolver the ring's STACK records go to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject IngestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "heapscope.producer._ingest.Ingest",
    .tp_basicsize = sizeof(IngestObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ingest(fd, ring_size, *, stream=False, dump_at_max=False, threads=False, tsc=False)\n--\n\n"
              "Reads one process's shared ring into a Tracker of its own.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ingest_init,
    .tp_dealloc = (destructor)Ingest_dealloc,
    .tp_methods = Ingest_methods,
    .tp_getset = Ingest_getset,
};

static PyMethodDef module_methods[] = {
    {"tsc_start", (PyCFunction)tsc_start, METH_NOARGS,
     "tsc_start() -> int\n--\n\nRead the TSC and CLOCK_MONOTONIC together: the anchor of every\n"
     "conversion of TSC stamps (Ingest(tsc=True)); before any client is told to stamp with the TSC."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ingest_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_ingest",
    .m_doc = "The producer's ring reader (Ingest).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__ingest(void) {
  PyObject *native = PyImport_ImportModule("heapscope.bookkeeping._native");
  if (!native) return NULL;
  PyObject *tracker = PyObject_GetAttrString(native, "Tracker"), *resolver = PyObject_GetAttrString(native, "Resolver");
  Py_DECREF(native);
  if (!tracker || !resolver || !PyType_Check(tracker) || !PyType_Check(resolver)) {
    Py_XDECREF(tracker);
    Py_XDECREF(resolver);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "heapscope.bookkeeping._native has no Tracker or Resolver");
    return NULL;
  }
  TrackerType = (PyTypeObject *)tracker; /* kept for the life of the process */
  ResolverType = (PyTypeObject *)resolver;
  if (PyType_Ready(&IngestType) < 0) return NULL;
  PyObject *m = PyModule_Create(&ingest_module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Ingest", (PyObject *)&IngestType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
