/*
 * heapscope.store._callsites: the callsite table's rows checked and made a dict in one C
 * loop (store/tree.py plain_callsites). A compiler build has ~450k callsites; checking each
 * row in Python bytecode was a tenth of every command that reads stacks.
 *
 *   plain_rows(rows) -> (callsites, deepest) | None
 *
 * `rows`: a list of (id, parent id or None, frame id) by id, as fetched. When every row is as
 * `record` writes them (integers, each parent's id below its child's), the dict
 * {id: (parent, frame)} and the depth of the deepest chain (a parent not among the rows is a
 * root, depth 0); None when some row is not, for the checked conversions to read them.
 *
 *   read_table(uri) -> (callsites, deepest) | None
 *
 * The same of the profile's stack_profile_callsite, read from the file (`uri`: the read-only
 * URI the reader opened) by SQLite's own C interface: no row tuples made and dropped (fetching
 * 450k rows through the sqlite3 module cost more than reading them). None when a row is not
 * plain or SQLite fails in any way: the reader's own query then reads the table as before and
 * says what is wrong with it. Only the reader calls it (store/reader.py callsites()).
 *
 *   fold(callsites, wrappers) -> (moved, depths, folded) | None
 *
 * Allocator wrappers folded into their callers (view/wrappers.py), over the dict callsites()
 * made: `wrappers` is the set of the wrappers' frame ids. `moved`: {id: (parent, frame)} of
 * each callsite the fold moves, by id (a wrapper's callsite takes its nearest caller's place,
 * what is below it moves up), `depths` their depths in the same order; `folded`: the set of
 * frame ids folded away. None when the dict
 * is not in id order with each parent's id below its child's (the Python walk folds it then).
 * A compiler build's ~450k callsites, a quarter of them moved, were folded in SQLite through a
 * temp table written and read back: a third of `report`'s time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

/* id -> depth: by id when the ids are dense (`record` numbers them from 1: one array, no
 * hashing), else open addressing with a capacity a power of two at least twice the rows. */
typedef struct {
  int64_t *keys;
  Py_ssize_t *depth;  /* -1: empty slot (or no such id) */
  size_t mask;
  int64_t dense;      /* > 0: depth[id] for ids in [0, dense) */
} Depths;

static inline size_t slot_of(int64_t key, size_t mask) {
  uint64_t k = (uint64_t)key;
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k & mask;
}

static Py_ssize_t *depth_slot(Depths *d, int64_t key) {
  if (d->dense > 0)
    return &d->depth[key];  /* add_rows checked every id (and parent: below its child) is in range */
  size_t i = slot_of(key, d->mask);
  while (d->depth[i] >= 0 && d->keys[i] != key)
    i = (i + 1) & d->mask;
  d->keys[i] = key;  /* an empty slot is told by its depth: a lookup that misses changes nothing */
  return &d->depth[i];
}

/* A row's value as an int64 when it is an int (not a bool, not text): 0, else -1. */
static int plain_int(PyObject *o, int64_t *out) {
  if (!PyLong_CheckExact(o))
    return -1;
  int overflow;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return -1;
  }
  *out = v;
  return 0;
}

/* Records the depth of row `id` (its parent's plus one; a parent not among the rows, a root's:
 * 0) and returns 0; 1: its parent is not below it, 2: an id out of the dense range. */
static int row_depth(Depths *d, int64_t id, int has_parent, int64_t parent_id, Py_ssize_t *deepest) {
  if (d->dense > 0 && (id < 0 || id >= d->dense))
    return 2;
  Py_ssize_t depth = 0;
  if (has_parent) {
    if (parent_id >= id)
      return 1;
    if (d->dense > 0 && parent_id < 0)
      return 2;
    Py_ssize_t above = *depth_slot(d, parent_id);
    depth = above >= 0 ? above + 1 : 0;
  }
  *depth_slot(d, id) = depth;
  if (depth > *deepest)
    *deepest = depth;
  return 0;
}

/* Adds the rows to `out`, the deepest chain's depth to `deepest` (-1: no rows); 0, else 1: a
 * row not plain, 2: an id out of the dense range, -1: an error. */
static int add_rows(PyObject *rows, PyObject *out, Depths *d, Py_ssize_t *deepest) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
    PyObject *row = PyList_GET_ITEM(rows, i);
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3)
      return 1;
    PyObject *cs = PyTuple_GET_ITEM(row, 0), *parent = PyTuple_GET_ITEM(row, 1), *frame = PyTuple_GET_ITEM(row, 2);
    int64_t id, parent_id = 0, frame_id;
    if (plain_int(cs, &id) < 0 || plain_int(frame, &frame_id) < 0)
      return 1;
    if (parent != Py_None && plain_int(parent, &parent_id) < 0)
      return 1;
    int rc = row_depth(d, id, parent != Py_None, parent_id, deepest);
    if (rc != 0)
      return rc;
    PyObject *entry = PyTuple_Pack(2, parent, frame);
    if (entry == NULL)
      return -1;
    rc = PyDict_SetItem(out, cs, entry);
    Py_DECREF(entry);
    if (rc < 0)
      return -1;
  }
  return 0;
}

/* The depths of `n` rows whose last (largest) id is `last`: by index when that is below a few
 * times the rows (-1: unknown), else hashed. -1 with MemoryError. */
static int depths_init(Depths *d, Py_ssize_t n, int64_t last) {
  size_t cap = 16;
  while (cap < 2 * (size_t)n + 2)
    cap *= 2;
  int dense = last >= 0 && last < 4 * (int64_t)n + 1024;
  if (dense)
    cap = (size_t)last + 1;
  d->keys = dense ? NULL : PyMem_Malloc(cap * sizeof(int64_t));
  d->depth = PyMem_Malloc(cap * sizeof(Py_ssize_t));
  d->mask = cap - 1;
  d->dense = dense ? last + 1 : 0;
  if ((!dense && d->keys == NULL) || d->depth == NULL) {
    PyMem_Free(d->keys);
    PyMem_Free(d->depth);
    PyErr_NoMemory();
    return -1;
  }
  memset(d->depth, 0xff, cap * sizeof(Py_ssize_t));
  return 0;
}

/* plain_rows() with ids by index (`dense`, when the last id allows) or hashed; sets `again`
 * when an id was out of the dense range after all, for the hashed one. */
static PyObject *rows_read(PyObject *rows, int dense, int *again) {
  Py_ssize_t n = PyList_GET_SIZE(rows);
  int64_t last = -1;
  PyObject *tail = n > 0 ? PyList_GET_ITEM(rows, n - 1) : NULL;
  if (!dense || tail == NULL || !PyTuple_Check(tail) || PyTuple_GET_SIZE(tail) != 3 ||
      plain_int(PyTuple_GET_ITEM(tail, 0), &last) < 0)
    last = -1;
  Depths d;
  if (depths_init(&d, n, last) < 0)
    return NULL;
  PyObject *out = PyDict_New(), *result = NULL;
  Py_ssize_t deepest = -1;
  int rc = out == NULL ? -1 : add_rows(rows, out, &d, &deepest);
  *again = rc == 2;
  if (rc == 1)
    result = Py_NewRef(Py_None);
  else if (rc == 0)
    result = Py_BuildValue("(On)", out, deepest);
  PyMem_Free(d.keys);
  PyMem_Free(d.depth);
  Py_XDECREF(out);
  return result;
}

/* One row of the table added to `out`: 0, 1: not plain, 2: out of the dense range, -1: error. */
static int add_stepped(sqlite3_stmt *st, PyObject *out, Depths *d, Py_ssize_t *deepest, PyObject **ids) {
  int parent_type = sqlite3_column_type(st, 1);
  if (sqlite3_column_type(st, 0) != SQLITE_INTEGER || sqlite3_column_type(st, 2) != SQLITE_INTEGER ||
      (parent_type != SQLITE_INTEGER && parent_type != SQLITE_NULL))
    return 1;
  int64_t id = sqlite3_column_int64(st, 0), parent_id = sqlite3_column_int64(st, 1);
  int rc = row_depth(d, id, parent_type == SQLITE_INTEGER, parent_id, deepest);
  if (rc != 0)
    return rc;
  PyObject *cs = PyLong_FromLongLong(id), *entry = PyTuple_New(2), *parent;
  if (parent_type == SQLITE_NULL)
    parent = Py_NewRef(Py_None);
  else if (ids != NULL && parent_id >= 0 && ids[parent_id] != NULL)
    parent = Py_NewRef(ids[parent_id]);  /* the parent's own id object: one int less a row */
  else
    parent = PyLong_FromLongLong(parent_id);
  PyObject *frame = PyLong_FromLongLong(sqlite3_column_int64(st, 2));
  if (cs == NULL || entry == NULL || parent == NULL || frame == NULL) {
    Py_XDECREF(cs);
    Py_XDECREF(entry);
    Py_XDECREF(parent);
    Py_XDECREF(frame);
    return -1;
  }
  PyTuple_SET_ITEM(entry, 0, parent);
  PyTuple_SET_ITEM(entry, 1, frame);
  rc = PyDict_SetItem(out, cs, entry);
  if (ids != NULL)
    Py_XSETREF(ids[id], cs);  /* our reference kept there */
  else
    Py_DECREF(cs);
  Py_DECREF(entry);
  return rc < 0 ? -1 : 0;
}

/* The table's rows into `out` through `db`: 0, 1: a row not plain, 2: out of the dense range,
 * 3: SQLite failed (the reader's own query says how), -1: a Python error. */
static int add_table(sqlite3 *db, PyObject *out, Py_ssize_t *deepest, int dense) {
  sqlite3_stmt *st = NULL;
  /* MAX(id) of an INTEGER PRIMARY KEY is one seek, COUNT(*) a count of the table's pages' cells
   * (asked together, they are a scan of every row) */
  int64_t last = -1, n = -1;
  if (sqlite3_prepare_v2(db, "SELECT MAX(id) FROM main.stack_profile_callsite", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER && dense)
    last = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM main.stack_profile_callsite", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  Depths d;
  if (n < 0 || n > PY_SSIZE_T_MAX / 4 || depths_init(&d, (Py_ssize_t)n, last) < 0)
    return n < 0 || n > PY_SSIZE_T_MAX / 4 ? 3 : -1;
  int rc = 3, step = SQLITE_DONE;
  /* dense ids: each id's int object by id, for its children's parent (references, dropped below) */
  PyObject **ids = d.dense > 0 ? PyMem_Calloc((size_t)d.dense, sizeof *ids) : NULL;
  if (d.dense > 0 && ids == NULL)
    rc = -1;
  else if (sqlite3_prepare_v2(db, "SELECT id, parent_id, frame_id FROM main.stack_profile_callsite ORDER BY id", -1,
                              &st, NULL) == SQLITE_OK) {
    rc = 0;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW)
      rc = add_stepped(st, out, &d, deepest, ids);
    if (rc == 0 && step != SQLITE_DONE)
      rc = 3;
  }
  sqlite3_finalize(st);
  for (int64_t i = 0; ids != NULL && i < d.dense; i++)
    Py_XDECREF(ids[i]);
  PyMem_Free(ids);
  PyMem_Free(d.keys);
  PyMem_Free(d.depth);
  return rc;
}

/* read_table(uri): the table read straight from the file, or None (see the top). */
static PyObject *read_table(PyObject *self, PyObject *arg) {
  (void)self;
  const char *uri = PyUnicode_AsUTF8(arg);
  if (uri == NULL)
    return NULL;
  sqlite3 *db = NULL;
  PyObject *result = NULL;
  int rc = 3;
  if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) == SQLITE_OK) {
    for (int dense = 1; dense >= 0; dense--) {
      PyObject *out = PyDict_New();
      Py_ssize_t deepest = -1;
      rc = out == NULL ? -1 : add_table(db, out, &deepest, dense);
      if (rc == 0)
        result = Py_BuildValue("(On)", out, deepest);
      Py_XDECREF(out);
      if (rc != 2)
        break;
    }
  }
  sqlite3_close(db);
  if (rc > 0)
    result = Py_NewRef(Py_None);
  return result;
}

static PyObject *plain_rows(PyObject *self, PyObject *rows) {
  (void)self;
  if (!PyList_Check(rows)) {
    PyErr_SetString(PyExc_TypeError, "plain_rows() takes the list of rows");
    return NULL;
  }
  int again = 0;
  PyObject *got = rows_read(rows, 1, &again);
  return again ? rows_read(rows, 0, &again) : got;
}

/* Where a callsite stands once folded, by index in id order. */
typedef struct {
  Py_ssize_t parent;  /* index of the new parent; -1: a root; -2: its parent as it is, not among the callsites */
  Py_ssize_t frame;   /* index of the callsite whose frame it shows */
  Py_ssize_t depth;
  Py_ssize_t caller;  /* the nearest at or above it that is no wrapper; -1: wrappers up to the root */
  Py_ssize_t old_depth;
} Place;

/* The callsites of one fold, by index in id order (borrowed: nothing below runs Python code
 * that could change the dict). */
typedef struct {
  Py_ssize_t n;
  int64_t *ids, last;
  PyObject **keys, **values;
  Place *place;
  Py_ssize_t *dense;  /* index by id when the ids allow it (`record` numbers them from 1), else NULL */
} Tree;

static void tree_free(Tree *t) {
  PyMem_Free(t->ids);
  PyMem_Free(t->keys);
  PyMem_Free(t->values);
  PyMem_Free(t->place);
  PyMem_Free(t->dense);
}

/* The dict's callsites into `t`: 0, 1: not in id order or not (parent, frame) pairs, -1: MemoryError. */
static int tree_read(Tree *t, PyObject *callsites) {
  Py_ssize_t n = t->n = PyDict_GET_SIZE(callsites), size = n > 0 ? n : 1;
  t->ids = PyMem_Malloc((size_t)size * sizeof *t->ids);
  t->keys = PyMem_Malloc((size_t)size * sizeof *t->keys);
  t->values = PyMem_Malloc((size_t)size * sizeof *t->values);
  t->place = PyMem_Malloc((size_t)size * sizeof *t->place);
  if (t->ids == NULL || t->keys == NULL || t->values == NULL || t->place == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0, k = 0;
  while (PyDict_Next(callsites, &pos, &key, &value)) {
    if (plain_int(key, &t->ids[k]) < 0 || !PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2 ||
        (k > 0 && t->ids[k] <= t->ids[k - 1]))
      return 1;
    t->keys[k] = key;
    t->values[k] = value;
    k++;
  }
  t->last = n > 0 ? t->ids[n - 1] : -1;
  if (n > 0 && t->ids[0] >= 0 && t->last < 4 * (int64_t)n + 1024) {
    t->dense = PyMem_Malloc((size_t)(t->last + 1) * sizeof *t->dense);
    if (t->dense == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    memset(t->dense, 0xff, (size_t)(t->last + 1) * sizeof *t->dense);
    for (Py_ssize_t i = 0; i < n; i++)
      t->dense[t->ids[i]] = i;
  }
  return 0;
}

/* The index of callsite `id`; -1 when it is not one. */
static Py_ssize_t tree_index(const Tree *t, int64_t id) {
  if (t->dense != NULL)
    return id >= 0 && id <= t->last ? t->dense[id] : -1;
  Py_ssize_t lo = 0, hi = t->n;
  while (lo < hi) {
    Py_ssize_t mid = lo + (hi - lo) / 2;
    if (t->ids[mid] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < t->n && t->ids[lo] == id ? lo : -1;
}

/* Places callsite i, its parent's place known: 0 kept, 1 moved, 2 moved and folded away (a
 * wrapper's), 3 not as `record` writes them (a parent not below it), -1 an error. */
static int tree_place(Tree *t, Py_ssize_t i, PyObject *wrappers) {
  PyObject *parent = PyTuple_GET_ITEM(t->values[i], 0), *frame = PyTuple_GET_ITEM(t->values[i], 1);
  Py_ssize_t up = -1, old_parent = -1;  /* old_parent as Place.parent would say it */
  if (parent != Py_None) {
    int64_t parent_id;
    if (plain_int(parent, &parent_id) < 0 || parent_id >= t->ids[i])
      return 3;
    up = tree_index(t, parent_id);
    old_parent = up >= 0 ? up : -2;
  }
  int wrapper = PySet_Contains(wrappers, frame);
  if (wrapper < 0)
    return -1;
  Place *p = &t->place[i];
  p->old_depth = up >= 0 ? t->place[up].old_depth + 1 : 0;
  if (!wrapper) {  /* its own frame, under its nearest caller that is no wrapper (a parent not
                    * among the callsites: a root, as the views read it) */
    p->caller = i;
    p->parent = up >= 0 ? t->place[up].caller : -1;
    p->frame = i;
    p->depth = p->parent >= 0 ? t->place[p->parent].depth + 1 : 0;
  } else if (up < 0 || t->place[up].caller < 0) {  /* wrappers up to the root: shown as they are */
    p->caller = -1;
    p->parent = old_parent;
    p->frame = i;
    p->depth = p->old_depth;
  } else {  /* folded: its caller's place */
    Place *c = &t->place[t->place[up].caller];
    *p = (Place){c->parent, c->frame, c->depth, t->place[up].caller, p->old_depth};
    return 2;
  }
  return p->parent == old_parent && p->frame == i && p->depth == p->old_depth ? 0 : 1;
}

/* Adds callsite i, moved, to `moved` and its depth to `depths`: 0, -1 an error. */
static int tree_add_moved(const Tree *t, Py_ssize_t i, PyObject *moved, PyObject *depths) {
  const Place *p = &t->place[i];
  PyObject *parent = p->parent == -1 ? Py_None : p->parent == -2 ? PyTuple_GET_ITEM(t->values[i], 0)
                                                                 : t->keys[p->parent];
  PyObject *entry = PyTuple_Pack(2, parent, PyTuple_GET_ITEM(t->values[p->frame], 1));
  PyObject *depth = entry == NULL ? NULL : PyLong_FromSsize_t(p->depth);
  int rc = depth == NULL ? -1 : PyDict_SetItem(moved, t->keys[i], entry);
  if (rc == 0)
    rc = PyList_Append(depths, depth);
  Py_XDECREF(entry);
  Py_XDECREF(depth);
  return rc;
}

/* fold(callsites, wrappers): see the top. */
static PyObject *fold(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *callsites, *wrappers;
  if (!PyArg_ParseTuple(args, "O!O!:fold", &PyDict_Type, &callsites, &PySet_Type, &wrappers))
    return NULL;
  Tree t = {0};
  PyObject *moved = PyDict_New(), *depths = PyList_New(0), *folded = PySet_New(NULL), *result = NULL;
  int rc = moved == NULL || depths == NULL || folded == NULL ? -1 : tree_read(&t, callsites);
  for (Py_ssize_t i = 0; rc == 0 && i < t.n; i++) {
    int how = tree_place(&t, i, wrappers);
    if (how == 3 || how < 0) {
      rc = how < 0 ? -1 : 1;
      break;
    }
    if (how == 2 && PySet_Add(folded, PyTuple_GET_ITEM(t.values[i], 1)) < 0)  /* a wrapper folded away */
      rc = -1;
    if (rc == 0 && how > 0 && tree_add_moved(&t, i, moved, depths) < 0)
      rc = -1;
  }
  if (rc == 0)
    result = PyTuple_Pack(3, moved, depths, folded);
  else if (rc == 1)
    result = Py_NewRef(Py_None);
  tree_free(&t);
  Py_XDECREF(moved);
  Py_XDECREF(depths);
  Py_XDECREF(folded);
  return result;
}

static PyMethodDef methods[] = {
    {"plain_rows", plain_rows, METH_O, "plain_rows(rows) -> ({id: (parent, frame)}, deepest) | None"},
    {"read_table", read_table, METH_O, "read_table(uri) -> ({id: (parent, frame)}, deepest) | None"},
    {"fold", fold, METH_VARARGS, "fold(callsites, wrappers) -> ({id: (parent, frame)}, [depth], folded) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "heapscope.store._callsites", "The callsite table's rows checked in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__callsites(void) { return PyModule_Create(&module); }
