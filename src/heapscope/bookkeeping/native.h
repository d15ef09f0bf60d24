/*
 * native.h: the Python objects of heapscope.bookkeeping._native (_native.c)
 * whose C state another extension of heapscope drives: the producer's ring
 * reader (producer/_ingest.c) feeds a process's Tracker and Resolver from its
 * ring while the GIL is released. Both extensions are built from the same
 * bookkeeping C files (meson.build), so a struct made by one is read by the
 * other's copy of the same code.
 *
 * `busy`: a drain (GIL released) or a resolve (Python namer) is using the
 * object; another thread calling into it meanwhile gets RuntimeError
 * instead of racing the loop.
 */
#ifndef HEAPSCOPE_NATIVE_H
#define HEAPSCOPE_NATIVE_H

#include <Python.h>

#include "resolver.h"
#include "tracker.h"

#define HS_BUSY_MESSAGE "Ingest.drain() is running in another thread"

typedef struct {
  PyObject_HEAD
  struct hs_tracker *t; /* NULL when closed or not initialised */
  int busy;
} TrackerObject;

typedef struct {
  PyObject_HEAD
  struct hs_resolver *s; /* NULL when closed */
  int busy;
} ResolverObject;

/* 0 when the tracker may be used now; else an exception is set. A tracker
 * sharing its peak (Tracker.share_peak) is busy while any tracker of that
 * peak is. */
static inline int hs_tracker_object_check(TrackerObject *self) {
  if (!self->t) {
    PyErr_SetString(PyExc_ValueError, "Tracker is closed");
    return -1;
  }
  if (self->busy || self->t->pk->busy) {
    PyErr_SetString(PyExc_RuntimeError, HS_BUSY_MESSAGE);
    return -1;
  }
  return 0;
}

/* MemoryError if the tracker dropped something since the last call (result
 * let go); else result. */
static inline PyObject *hs_tracker_object_oom(struct hs_tracker *t, PyObject *result) {
  if (t->oom) {
    t->oom = 0;
    Py_XDECREF(result);
    return PyErr_NoMemory();
  }
  return result;
}

#endif /* HEAPSCOPE_NATIVE_H */
