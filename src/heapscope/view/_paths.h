/*
 * What the files of heapscope.view._paths share (_paths.c: merged trees; _totals.c:
 * report's walk of every stack): a map from a 64-bit key to a node or row number.
 */
#ifndef HEAPSCOPE_VIEW_PATHS_H
#define HEAPSCOPE_VIEW_PATHS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* (parent node, key) -> node: open addressing on a 64-bit key, capacity a power of two. */
typedef struct {
  uint64_t *keys;
  Py_ssize_t *vals;  /* -1: empty slot */
  size_t cap, len;
} NodeMap;

static inline size_t slot_of(uint64_t k, size_t cap) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k & (cap - 1);
}

static inline int map_init(NodeMap *m, size_t cap) {
  m->keys = PyMem_Malloc(cap * sizeof *m->keys);
  m->vals = PyMem_Malloc(cap * sizeof *m->vals);
  if (m->keys == NULL || m->vals == NULL) {
    PyMem_Free(m->keys);
    PyMem_Free(m->vals);
    PyErr_NoMemory();
    return -1;
  }
  memset(m->vals, 0xff, cap * sizeof *m->vals);
  m->cap = cap;
  m->len = 0;
  return 0;
}

static inline void map_free(NodeMap *m) {
  PyMem_Free(m->keys);
  PyMem_Free(m->vals);
}

static inline Py_ssize_t *map_slot(NodeMap *m, uint64_t k) {
  size_t i = slot_of(k, m->cap);
  while (m->vals[i] >= 0 && m->keys[i] != k)
    i = (i + 1) & (m->cap - 1);
  m->keys[i] = k;
  return &m->vals[i];
}

/* Doubles the map when it is half full, so probes stay short. */
static inline int map_grow(NodeMap *m) {
  if (2 * (m->len + 1) <= m->cap)
    return 0;
  NodeMap bigger;
  if (map_init(&bigger, 2 * m->cap) < 0)
    return -1;
  for (size_t i = 0; i < m->cap; i++)
    if (m->vals[i] >= 0)
      *map_slot(&bigger, m->keys[i]) = m->vals[i];
  bigger.len = m->len;
  map_free(m);
  *m = bigger;
  return 0;
}

/* function_totals(callsites, values, frame_fns, fns_of, python, no_python) (_totals.c) */
PyObject *paths_function_totals(PyObject *self, PyObject *args);

/* desampled_selfs(node_of, values, nodes, interval, estimate) (_selfs.c) */
PyObject *paths_desampled_selfs(PyObject *self, PyObject *args);

/* size_cells(node_of, items, interval, estimate) (_selfs.c) */
PyObject *paths_size_cells(PyObject *self, PyObject *args);

/* sparse(values, shift) (_selfs.c) */
PyObject *paths_sparse(PyObject *self, PyObject *args);

#endif
