/*
 * heapscope.view._paths: the per-callsite loops of the views, in C. A build's profile has
 * ~450k callsites and a merged tree is built for each of its ~110 processes: the same
 * loops in Python bytecode were most of `flamegraph`'s time. They work on the Python
 * objects the reader returns (the callsite dict, the callsites' ids), so the reader's
 * checks and the views' rules stay where they are; only the loops move.
 *
 *   merge_paths(callsites, leaves, frame_steps, steps, python)
 *       -> (parents, keys, sources, node_of)
 *
 * view/tree.py build_tree's first pass: each leaf's path, root first, merged into nodes
 * by (parent node, step key). `callsites` is {id: (parent id or None, frame id)};
 * `frame_steps` {frame id: (key, source, key, source, ...)}, the node keys a frame adds
 * (interned to ints by the caller) with their sources; a frame not in it is asked of
 * `steps(frame id)`, which adds it. `python`: None, or the set of frames kept (the others
 * merge into their nearest kept ancestor, or -1: none). Returns the nodes' parents, keys
 * and sources (a node's source is the first not-None one met), and {callsite: node} in
 * the order the Python loop filled it.
 *
 *   preorder(parents, names, maps, lines) -> (order, new_id, parent, depth)
 *
 * build_tree's second pass: the merged nodes renumbered in preorder, siblings by (name,
 * mapping, line), so a tree's ids are stable.
 *
 *   function_totals(...)  view/report.py function_rows' walk (_totals.c)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_paths.h"

/* A growable array of Python references (owned). */
typedef struct {
  PyObject **items;
  Py_ssize_t len, cap;
} Refs;

static int refs_push(Refs *r, PyObject *o) {
  if (r->len == r->cap) {
    Py_ssize_t cap = r->cap ? 2 * r->cap : 64;
    PyObject **items = PyMem_Realloc(r->items, (size_t)cap * sizeof *items);
    if (items == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    r->items = items;
    r->cap = cap;
  }
  Py_INCREF(o);
  r->items[r->len++] = o;
  return 0;
}

static void refs_clear(Refs *r) {
  for (Py_ssize_t i = 0; i < r->len; i++)
    Py_DECREF(r->items[i]);
  r->len = 0;
}

/* The nodes made so far: parent and key as C integers, the source as a reference. */
typedef struct {
  Py_ssize_t *parent;
  long *key;
  Refs source;
  Py_ssize_t len, cap;
  NodeMap by_key;
} Nodes;

static Py_ssize_t nodes_add(Nodes *n, Py_ssize_t parent, long key, PyObject *source) {
  if (n->len == n->cap) {
    Py_ssize_t cap = n->cap ? 2 * n->cap : 1024;
    Py_ssize_t *p = PyMem_Realloc(n->parent, (size_t)cap * sizeof *p);
    if (p != NULL)
      n->parent = p;
    long *k = PyMem_Realloc(n->key, (size_t)cap * sizeof *k);
    if (k != NULL)
      n->key = k;
    if (p == NULL || k == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    n->cap = cap;
  }
  if (refs_push(&n->source, source) < 0)
    return -1;
  n->parent[n->len] = parent;
  n->key[n->len] = key;
  return n->len++;
}

/* The node of (parent, key), made with `source` when new; a node without a source takes
 * the first one met. */
static Py_ssize_t node_of_step(Nodes *n, Py_ssize_t parent, long key, PyObject *source) {
  if (map_grow(&n->by_key) < 0)
    return -1;
  uint64_t k = ((uint64_t)(parent + 1) << 32) | (uint32_t)key;
  Py_ssize_t *slot = map_slot(&n->by_key, k);
  if (*slot >= 0) {
    PyObject **have = &n->source.items[*slot];
    if (source != Py_None && *have == Py_None) {
      Py_INCREF(source);
      Py_SETREF(*have, source);
    }
    return *slot;
  }
  Py_ssize_t idx = nodes_add(n, parent, key, source);
  if (idx < 0)
    return -1;
  *slot = idx;
  n->by_key.len++;
  return idx;
}

/* A frame's steps: from `frame_steps`, else from `steps(frame)`; a new reference. */
static PyObject *frame_steps_of(PyObject *frame_steps, PyObject *steps, PyObject *frame) {
  PyObject *got = PyDict_GetItemWithError(frame_steps, frame);
  if (got != NULL) {
    Py_INCREF(got);
    return got;
  }
  if (PyErr_Occurred())
    return NULL;
  got = PyObject_CallOneArg(steps, frame);
  if (got != NULL && (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) % 2 != 0)) {
    Py_DECREF(got);
    PyErr_SetString(PyExc_TypeError, "steps() must return a flat tuple of (key, source) pairs");
    return NULL;
  }
  return got;
}

static int set_node(PyObject *raw_node, PyObject *cs, Py_ssize_t node) {
  PyObject *v = PyLong_FromSsize_t(node);
  if (v == NULL)
    return -1;
  int rc = PyDict_SetItem(raw_node, cs, v);
  Py_DECREF(v);
  return rc;
}

/* Merges one path, `chain` (leaf first), below `parent`. */
static int merge_chain(Nodes *n, Refs *chain, Py_ssize_t parent, PyObject *callsites, PyObject *frame_steps,
                       PyObject *steps, PyObject *python, PyObject *raw_node) {
  for (Py_ssize_t c = chain->len - 1; c >= 0; c--) {
    PyObject *cs = chain->items[c];
    PyObject *entry = PyDict_GetItemWithError(callsites, cs);
    if (entry == NULL || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "callsites must map an id to (parent, frame)");
      return -1;
    }
    PyObject *frame = PyTuple_GET_ITEM(entry, 1);
    if (python != Py_None) {
      int kept = PySet_Contains(python, frame);
      if (kept < 0)
        return -1;
      if (!kept) {
        if (set_node(raw_node, cs, parent) < 0)
          return -1;
        continue;
      }
    }
    PyObject *fsteps = frame_steps_of(frame_steps, steps, frame);
    if (fsteps == NULL)
      return -1;
    for (Py_ssize_t s = 0; s + 1 < PyTuple_GET_SIZE(fsteps); s += 2) {
      long key = PyLong_AsLong(PyTuple_GET_ITEM(fsteps, s));
      if ((key == -1 && PyErr_Occurred()) || key < 0 || key > (long)UINT32_MAX) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_ValueError, "a step key out of range");
        Py_DECREF(fsteps);
        return -1;
      }
      parent = node_of_step(n, parent, key, PyTuple_GET_ITEM(fsteps, s + 1));
      if (parent < 0) {
        Py_DECREF(fsteps);
        return -1;
      }
    }
    Py_DECREF(fsteps);
    if (set_node(raw_node, cs, parent) < 0)
      return -1;
  }
  return 0;
}

/* Collects into `chain` the part of `leaf`'s path not merged yet (leaf first) and returns
 * the node it goes below: -1 for a root, -2 on error. */
static Py_ssize_t unmerged_chain(Refs *chain, PyObject *leaf, PyObject *callsites, PyObject *raw_node,
                                 Py_ssize_t n_callsites) {
  PyObject *node = leaf;
  while (node != Py_None) {
    PyObject *have = PyDict_GetItemWithError(raw_node, node);
    if (have != NULL)
      return PyLong_AsSsize_t(have);
    if (PyErr_Occurred())
      return -2;
    if (chain->len > n_callsites)  /* a parent cycle: the reader refuses them, but never loop */
      return -1;
    PyObject *entry = PyDict_GetItemWithError(callsites, node);
    if (entry == NULL)
      return PyErr_Occurred() ? -2 : -1;  /* a dangling parent: a root */
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
      PyErr_SetString(PyExc_TypeError, "callsites must map an id to (parent, frame)");
      return -2;
    }
    if (refs_push(chain, node) < 0)
      return -2;
    node = PyTuple_GET_ITEM(entry, 0);
  }
  return -1;
}

static PyObject *nodes_result(Nodes *n, PyObject *raw_node) {
  PyObject *parents = PyList_New(n->len), *keys = PyList_New(n->len), *sources = PyList_New(n->len);
  if (parents == NULL || keys == NULL || sources == NULL)
    goto fail;
  for (Py_ssize_t i = 0; i < n->len; i++) {
    PyObject *p = PyLong_FromSsize_t(n->parent[i]), *k = PyLong_FromLong(n->key[i]);
    if (p == NULL || k == NULL) {
      Py_XDECREF(p);
      Py_XDECREF(k);
      goto fail;
    }
    PyList_SET_ITEM(parents, i, p);
    PyList_SET_ITEM(keys, i, k);
    Py_INCREF(n->source.items[i]);
    PyList_SET_ITEM(sources, i, n->source.items[i]);
  }
  return Py_BuildValue("(NNNO)", parents, keys, sources, raw_node);
fail:
  Py_XDECREF(parents);
  Py_XDECREF(keys);
  Py_XDECREF(sources);
  return NULL;
}

static PyObject *merge_paths(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *callsites, *leaves, *frame_steps, *steps, *python;
  if (!PyArg_ParseTuple(args, "O!OO!OO:merge_paths", &PyDict_Type, &callsites, &leaves, &PyDict_Type,
                        &frame_steps, &steps, &python))
    return NULL;
  if (python != Py_None && !PyAnySet_Check(python)) {
    PyErr_SetString(PyExc_TypeError, "python must be a set or None");
    return NULL;
  }
  Py_ssize_t n_callsites = PyDict_Size(callsites);
  PyObject *raw_node = PyDict_New(), *it = PyObject_GetIter(leaves), *leaf, *result = NULL;
  Nodes n = {0};
  Refs chain = {0};
  if (raw_node == NULL || it == NULL || map_init(&n.by_key, 1024) < 0)
    goto done;
  while ((leaf = PyIter_Next(it)) != NULL) {
    Py_ssize_t parent = unmerged_chain(&chain, leaf, callsites, raw_node, n_callsites);
    int rc = parent < -1 ? -1 : merge_chain(&n, &chain, parent, callsites, frame_steps, steps, python, raw_node);
    refs_clear(&chain);
    Py_DECREF(leaf);
    if (rc < 0)
      goto done;
  }
  if (!PyErr_Occurred())
    result = nodes_result(&n, raw_node);
done:
  refs_clear(&chain);
  PyMem_Free(chain.items);
  refs_clear(&n.source);
  PyMem_Free(n.source.items);
  PyMem_Free(n.parent);
  PyMem_Free(n.key);
  if (n.by_key.vals != NULL)
    map_free(&n.by_key);
  Py_XDECREF(it);
  Py_XDECREF(raw_node);
  return result;
}

/* --- preorder ---------------------------------------------------------------------- */

/* What the sibling sort compares: set for the one sort running (the GIL is held throughout). */
static struct {
  PyObject *names, *maps;
  const Py_ssize_t *lines;
  int failed;
} order_by;

/* Siblings by (name, mapping, line) ascending; equal ones by id descending, as the Python loop
 * visited them (a stable sort reversed, then popped from a stack). */
static int sibling_cmp(const void *pa, const void *pb) {
  Py_ssize_t a = *(const Py_ssize_t *)pa, b = *(const Py_ssize_t *)pb;
  int c = PyUnicode_Compare(PyList_GET_ITEM(order_by.names, a), PyList_GET_ITEM(order_by.names, b));
  if (c == 0)
    c = PyUnicode_Compare(PyList_GET_ITEM(order_by.maps, a), PyList_GET_ITEM(order_by.maps, b));
  if (c == -1 && PyErr_Occurred()) {
    order_by.failed = 1;
    return 0;
  }
  if (c == 0 && order_by.lines != NULL)
    c = (order_by.lines[a] > order_by.lines[b]) - (order_by.lines[a] < order_by.lines[b]);
  return c != 0 ? c : (a < b) - (a > b);
}

/* Each node's children (and the roots, under -1) as spans of one array, in id order. */
typedef struct {
  Py_ssize_t *start;  /* node i's children: kids[start[i + 1] .. start[i + 2]); roots at [start[0], start[1]) */
  Py_ssize_t *kids;
} Children;

static int children_of(const Py_ssize_t *parent, Py_ssize_t n, Children *c) {
  c->start = PyMem_Calloc((size_t)n + 2, sizeof *c->start);
  c->kids = PyMem_Malloc(((size_t)n + 1) * sizeof *c->kids);
  if (c->start == NULL || c->kids == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    c->start[parent[i] + 2]++;
  for (Py_ssize_t i = 1; i < n + 2; i++)
    c->start[i] += c->start[i - 1];
  Py_ssize_t *fill = PyMem_Malloc(((size_t)n + 1) * sizeof *fill);
  if (fill == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  memcpy(fill, c->start, ((size_t)n + 1) * sizeof *fill);
  for (Py_ssize_t i = 0; i < n; i++)
    c->kids[fill[parent[i] + 1]++] = i;
  PyMem_Free(fill);
  return 0;
}

/* Visits the nodes depth first, siblings in sibling_cmp's order: order[k] is the k-th node
 * visited, at new_parent[k] and new_depth[k]; new_id[old] its position. */
static int visit(const Children *c, const Py_ssize_t *parent, Py_ssize_t n, Py_ssize_t *order, Py_ssize_t *new_id,
                 Py_ssize_t *new_parent, Py_ssize_t *new_depth) {
  Py_ssize_t *stack = PyMem_Malloc(((size_t)n + 1) * sizeof *stack), top = 0, pos = 0;
  if (stack == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t g = -1; g < n && !order_by.failed; g++) {  /* every group of siblings sorted once */
    Py_ssize_t *kids = c->kids + c->start[g + 1], count = c->start[g + 2] - c->start[g + 1];
    if (count > 1)
      qsort(kids, (size_t)count, sizeof *kids, sibling_cmp);
  }
  for (Py_ssize_t k = c->start[1] - 1; k >= c->start[0]; k--)
    stack[top++] = c->kids[k];
  while (top > 0) {
    Py_ssize_t old = stack[--top], up = parent[old];
    /* preorder: a node's parent has its place before the node */
    new_parent[pos] = up < 0 ? -1 : new_id[up];
    new_depth[pos] = up < 0 ? 0 : new_depth[new_id[up]] + 1;
    new_id[old] = pos;
    order[pos++] = old;
    for (Py_ssize_t k = c->start[old + 2] - 1; k >= c->start[old + 1]; k--)
      stack[top++] = c->kids[k];
  }
  PyMem_Free(stack);
  return 0;
}

/* Python ints as C ones, each in [lo, hi] (inclusive: a line may be 2^63 - 1); -1 with an
 * exception naming `what` when one is not. */
static int c_ints(PyObject *list, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi, const char *what, Py_ssize_t *out) {
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(list, i));
    if (v == -1 && PyErr_Occurred())
      return -1;
    if (v < lo || v > hi) {
      PyErr_Format(PyExc_ValueError, "%s out of range", what);
      return -1;
    }
    out[i] = v;
  }
  return 0;
}

static PyObject *ssize_list(const Py_ssize_t *a, Py_ssize_t n) {
  PyObject *out = PyList_New(n);
  for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
    PyObject *v = PyLong_FromSsize_t(a[i]);
    if (v == NULL)
      Py_CLEAR(out);
    else
      PyList_SET_ITEM(out, i, v);
  }
  return out;
}

static PyObject *preorder(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *parents, *names, *maps, *lines, *result = NULL;
  if (!PyArg_ParseTuple(args, "O!O!O!O:preorder", &PyList_Type, &parents, &PyList_Type, &names, &PyList_Type,
                        &maps, &lines))
    return NULL;
  Py_ssize_t n = PyList_GET_SIZE(parents);
  if (PyList_GET_SIZE(names) != n || PyList_GET_SIZE(maps) != n ||
      (lines != Py_None && (!PyList_Check(lines) || PyList_GET_SIZE(lines) != n))) {
    PyErr_SetString(PyExc_ValueError, "preorder() takes lists of one length (lines: or None)");
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (!PyUnicode_Check(PyList_GET_ITEM(names, i)) || !PyUnicode_Check(PyList_GET_ITEM(maps, i))) {
      PyErr_SetString(PyExc_TypeError, "names and mappings must be str");
      return NULL;
    }
  Py_ssize_t *buf = PyMem_Malloc(6 * ((size_t)n + 1) * sizeof *buf);
  Children c = {NULL, NULL};
  if (buf == NULL)
    return PyErr_NoMemory();
  Py_ssize_t *parent = buf, *line = buf + n + 1, *order = line + n + 1, *new_id = order + n + 1;
  Py_ssize_t *new_parent = new_id + n + 1, *new_depth = new_parent + n + 1;
  const Py_ssize_t *lines_c = NULL;
  if (c_ints(parents, n, -1, n - 1, "a node's parent", parent) < 0)
    goto done;
  /* a parent must come before its child in the merge's order: no cycle, every node reached */
  for (Py_ssize_t i = 0; i < n; i++)
    if (parent[i] >= i) {
      PyErr_SetString(PyExc_ValueError, "a node's parent after it");
      goto done;
    }
  if (lines != Py_None) {
    if (c_ints(lines, n, PY_SSIZE_T_MIN, PY_SSIZE_T_MAX, "a line", line) < 0)
      goto done;
    lines_c = line;
  }
  if (children_of(parent, n, &c) < 0)
    goto done;
  order_by.names = names;
  order_by.maps = maps;
  order_by.lines = lines_c;
  order_by.failed = 0;
  int rc = visit(&c, parent, n, order, new_id, new_parent, new_depth);
  if (rc == 0 && !order_by.failed)
    result = Py_BuildValue("(NNNN)", ssize_list(order, n), ssize_list(new_id, n), ssize_list(new_parent, n),
                           ssize_list(new_depth, n));
done:
  order_by.names = order_by.maps = NULL;
  PyMem_Free(c.start);
  PyMem_Free(c.kids);
  PyMem_Free(buf);
  return result;
}

static PyMethodDef methods[] = {
    {"merge_paths", merge_paths, METH_VARARGS,
     "merge_paths(callsites, leaves, frame_steps, steps, python) -> (parents, keys, sources, node_of)"},
    {"preorder", preorder, METH_VARARGS,
     "preorder(parents, names, mappings, lines) -> (order, new_id, parent, depth)"},
    {"function_totals", paths_function_totals, METH_VARARGS,
     "function_totals(callsites, values, frame_fns, fns_of, python, no_python) -> (self, totals, where, prefix)"},
    {"desampled_selfs", paths_desampled_selfs, METH_VARARGS,
     "desampled_selfs(node_of, values, nodes, interval, estimate) -> (space, objects, alloc_space, alloc_objects)"},
    {"size_cells", paths_size_cells, METH_VARARGS,
     "size_cells(node_of, items, interval, estimate) -> [node + 1, bucket, allocations, bytes, ...] | None"},
    {"sparse", paths_sparse, METH_VARARGS, "sparse(values, shift) -> [gap, value, gap, value, ...]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "heapscope.view._paths", "The views' per-callsite loops (merged trees), in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__paths(void) { return PyModule_Create(&module); }
