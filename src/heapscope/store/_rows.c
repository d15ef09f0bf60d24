/*
 * heapscope.store._rows: a query's rows grouped by process, read by SQLite's own C interface.
 *
 *   grouped(uri, setup, sql, params, types, tagged) -> {key: [row, ...]} | None
 *
 * Opens the profile at `uri` (the read-only URI the reader opened), runs each statement of
 * `setup` (the reader's temporary views, so that the query sees what the reader's connection
 * sees), then `sql` with `params` (ints, strs or None) bound. The first column is the key (a
 * upid); each row's other columns become a tuple, appended to its key's list in the order
 * SQLite returns them. With `tagged`, a row is (second column, (the rest...)): a value each
 * row carries apart from the others (a heap's name). `types` holds a letter per column, the
 * key's included, saying what `record` writes there: 'i' an integer, 'n' an integer or NULL,
 * 't' text. Values come as int, str and None, as the sqlite3 module gives them; one str
 * object is shared by neighbouring rows with the same text.
 *
 * None, with no exception, when SQLite fails in any way or a value is not of its column's type:
 * the reader's own query then reads the rows and says what is wrong with them. So a caller
 * needs no pass of its own over the rows to check their types first.
 *
 *   summed(uri, setup, sql, params, types, keys, most) -> [(key..., sum...), ...] | None
 *
 * The same connection and checks; the rows summed per key (the first `keys` columns: 'i' or
 * 't'), every other column ('n') as SQLite's SUM sums integers, the groups in the order SQLite's
 * GROUP BY of those columns gives them; None past `most` groups (a caller that reads many in
 * chunks keeps doing so). A build's delta rows (195k, 100k groups) took SQLite's GROUP BY
 * ~0.35 s to sort and sum, against ~0.03 s to step through. A build's flamegraph reads ~300k memory samples and ~130k size rows: through the
 * sqlite3 module, a Python tuple a row and a loop to sort them into processes took 2-3 times
 * what SQLite took to step them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

/* Columns a query may have: the readers' widest has ten. */
#define MAX_COLUMNS 32

typedef struct {
  sqlite3_stmt *st;
  int columns;
  const char *types;  /* a letter per column (see the top) */
  PyObject *last_text[MAX_COLUMNS];  /* per column, the text of the row before, shared when equal */
} Reader;

/* Column `c`'s text, the object of the row before when it is the same text; NULL as value_of. */
static PyObject *text_of(Reader *r, int c) {
  const char *text = (const char *)sqlite3_column_text(r->st, c);
  Py_ssize_t n = sqlite3_column_bytes(r->st, c);
  PyObject *last = r->last_text[c];
  if (text == NULL)
    return PyErr_NoMemory();
  if (last != NULL) {
    Py_ssize_t have;
    const char *was = PyUnicode_AsUTF8AndSize(last, &have);
    if (was != NULL && have == n && memcmp(was, text, (size_t)n) == 0)
      return Py_NewRef(last);
  }
  PyObject *s = PyUnicode_DecodeUTF8(text, n, "strict");
  if (s == NULL) {
    PyErr_Clear();  /* not UTF-8: the sqlite3 module's read says so */
    return NULL;
  }
  Py_XSETREF(r->last_text[c], Py_NewRef(s));
  return s;
}

/* Column `c` of the current row: a new reference; NULL with no exception set when the value is
 * not of the column's type, NULL with one set on error. */
static PyObject *value_of(Reader *r, int c) {
  int type = sqlite3_column_type(r->st, c);
  char want = r->types[c];
  if (type == SQLITE_INTEGER && (want == 'i' || want == 'n'))
    return PyLong_FromLongLong(sqlite3_column_int64(r->st, c));
  if (type == SQLITE_NULL && want == 'n')
    return Py_NewRef(Py_None);
  if (type == SQLITE_TEXT && want == 't')
    return text_of(r, c);
  return NULL;
}

/* Columns [from, columns) of the current row as a tuple; NULL as value_of. */
static PyObject *tuple_of(Reader *r, int from) {
  PyObject *row = PyTuple_New(r->columns - from);
  if (row == NULL)
    return NULL;
  for (int c = from; c < r->columns; c++) {
    PyObject *v = value_of(r, c);
    if (v == NULL) {
      Py_DECREF(row);
      return NULL;
    }
    PyTuple_SET_ITEM(row, c - from, v);
  }
  return row;
}

/* The current row as grouped() keeps it; NULL as value_of. */
static PyObject *row_of(Reader *r, int tagged) {
  if (!tagged)
    return tuple_of(r, 1);
  PyObject *tag = value_of(r, 1), *rest = tag == NULL ? NULL : tuple_of(r, 2);
  if (rest == NULL) {
    Py_XDECREF(tag);
    return NULL;
  }
  PyObject *row = PyTuple_Pack(2, tag, rest);
  Py_DECREF(tag);
  Py_DECREF(rest);
  return row;
}

/* Binds `params`: 0, 1: SQLite refused, -1: error set (a value of another type: TypeError). */
static int bind(sqlite3_stmt *st, PyObject *params) {
  Py_ssize_t n = PyTuple_GET_SIZE(params);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *p = PyTuple_GET_ITEM(params, i);
    int rc, at = (int)i + 1;
    if (p == Py_None) {
      rc = sqlite3_bind_null(st, at);
    } else if (PyLong_CheckExact(p)) {
      long long v = PyLong_AsLongLong(p);
      if (v == -1 && PyErr_Occurred())
        return -1;
      rc = sqlite3_bind_int64(st, at, v);
    } else if (PyUnicode_Check(p)) {
      Py_ssize_t len;
      const char *s = PyUnicode_AsUTF8AndSize(p, &len);
      if (s == NULL)
        return -1;
      rc = sqlite3_bind_text64(st, at, s, (sqlite3_uint64)len, SQLITE_TRANSIENT, SQLITE_UTF8);
    } else {
      PyErr_Format(PyExc_TypeError, "grouped() binds ints, strs and None, not %s", Py_TYPE(p)->tp_name);
      return -1;
    }
    if (rc != SQLITE_OK)
      return 1;
  }
  return 0;
}

/* Steps the statement into `out`: 0, 1: a row it cannot take (None), -1: error set. */
static int read_rows(Reader *r, PyObject *out, int tagged) {
  PyObject *list = NULL;  /* borrowed: the current key's, while rows of one key follow each other */
  long long key = 0;
  int step;
  while ((step = sqlite3_step(r->st)) == SQLITE_ROW) {
    if (sqlite3_column_type(r->st, 0) != SQLITE_INTEGER || r->types[0] != 'i')
      return 1;
    long long k = sqlite3_column_int64(r->st, 0);
    if (list == NULL || k != key) {
      PyObject *obj = PyLong_FromLongLong(k);
      if (obj == NULL)
        return -1;
      list = PyDict_GetItemWithError(out, obj);
      if (list == NULL && !PyErr_Occurred() && (list = PyList_New(0)) != NULL) {
        int rc = PyDict_SetItem(out, obj, list);
        Py_DECREF(list);  /* the dict holds it */
        if (rc < 0)
          list = NULL;
      }
      Py_DECREF(obj);
      if (list == NULL)
        return -1;
      key = k;
    }
    PyObject *row = row_of(r, tagged);
    if (row == NULL)
      return PyErr_Occurred() ? -1 : 1;
    int rc = PyList_Append(list, row);
    Py_DECREF(row);
    if (rc < 0)
      return -1;
  }
  return step == SQLITE_DONE ? 0 : 1;
}

/* Opens `uri` read-only, runs `setup`'s statements, prepares `sql` and binds `params`: 0, 1:
 * SQLite failed (None), -1: error set. The caller finalizes and closes what was made. */
static int open_prepared(const char *uri, PyObject *setup, const char *sql, PyObject *params, sqlite3 **db,
                         sqlite3_stmt **st) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(setup); i++)
    if (!PyUnicode_Check(PyTuple_GET_ITEM(setup, i))) {
      PyErr_SetString(PyExc_TypeError, "setup statements must be strs");
      return -1;
    }
  if (sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK)
    return 1;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(setup); i++) {
    const char *statement = PyUnicode_AsUTF8(PyTuple_GET_ITEM(setup, i));
    if (statement == NULL)
      return -1;
    if (sqlite3_exec(*db, statement, NULL, NULL, NULL) != SQLITE_OK)
      return 1;
  }
  if (sqlite3_prepare_v2(*db, sql, -1, st, NULL) != SQLITE_OK)
    return 1;
  return bind(*st, params);
}

static PyObject *grouped(PyObject *self, PyObject *args) {
  (void)self;
  const char *uri, *sql, *types;
  PyObject *setup, *params;
  int tagged;
  if (!PyArg_ParseTuple(args, "sO!sO!sp", &uri, &PyTuple_Type, &setup, &sql, &PyTuple_Type, &params, &types,
                        &tagged))
    return NULL;
  sqlite3 *db = NULL;
  Reader r = {0};
  PyObject *out = NULL;
  int rc = open_prepared(uri, setup, sql, params, &db, &r.st);
  if (rc == 0) {
    r.columns = sqlite3_column_count(r.st);
    r.types = types;
    if (r.columns < (tagged ? 3 : 2) || r.columns > MAX_COLUMNS || strlen(types) != (size_t)r.columns) {
      PyErr_Format(PyExc_ValueError, "grouped() has %zu column types for a query of %d columns", strlen(types),
                   r.columns);
      rc = -1;
    }
  }
  if (rc == 0) {
    out = PyDict_New();
    rc = out == NULL ? -1 : read_rows(&r, out, tagged);
  }
  sqlite3_finalize(r.st);
  sqlite3_close(db);
  for (int c = 0; c < MAX_COLUMNS; c++)
    Py_XDECREF(r.last_text[c]);
  if (rc == 0)
    return out;
  Py_XDECREF(out);
  if (rc < 0)
    return NULL;
  Py_RETURN_NONE;
}

/* summed(): rows summed per key in a hash table, then ordered by key as SQLite's GROUP BY orders
 * them. A key is up to MAX_KEYS columns, integers or text (a text is kept as its index among
 * the few distinct texts met); every other column is summed as SQLite's SUM sums integers:
 * NULLs skipped, None when a group has only NULLs, and no answer on overflow. */
#define MAX_KEYS 4
#define MAX_SUMS 16
#define MAX_TEXTS 64  /* distinct key texts (heap names): more goes to SQLite's GROUP BY */

typedef struct {
  int keys, sums;
  const char *types;
  Py_ssize_t n, cap, most;  /* most: groups at most, past which the answer is None */
  long long *key;        /* n * keys */
  long long *sum;        /* n * sums */
  unsigned char *seen;   /* n * sums: a value that is not NULL was added */
  Py_ssize_t *slot;      /* 2 * cap slots: a group's index + 1, 0 empty */
  const char *text[MAX_TEXTS];
  Py_ssize_t text_len[MAX_TEXTS];
  int texts;
  Py_ssize_t rank[MAX_TEXTS];  /* each text's place in byte order, for the ordering */
} Groups;

static void groups_free(Groups *g) {
  PyMem_Free(g->key);
  PyMem_Free(g->sum);
  PyMem_Free(g->seen);
  PyMem_Free(g->slot);
  for (int t = 0; t < g->texts; t++)
    PyMem_Free((void *)g->text[t]);
}

static size_t key_hash(const long long *k, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < n; i++) {
    h ^= (uint64_t)k[i];
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
  }
  return (size_t)h;
}

/* Room for one more group: 0, -1 with MemoryError. */
static int groups_grow(Groups *g) {
  if (g->n < g->cap)
    return 0;
  Py_ssize_t cap = g->cap ? 2 * g->cap : 1024;
  long long *key = PyMem_Realloc(g->key, (size_t)cap * (size_t)g->keys * sizeof *key);
  if (key != NULL)
    g->key = key;
  long long *sum = PyMem_Realloc(g->sum, (size_t)cap * (size_t)g->sums * sizeof *sum);
  if (sum != NULL)
    g->sum = sum;
  unsigned char *seen = PyMem_Realloc(g->seen, (size_t)cap * (size_t)g->sums);
  if (seen != NULL)
    g->seen = seen;
  Py_ssize_t *slot = PyMem_Calloc(2 * (size_t)cap, sizeof *slot);
  if (key == NULL || sum == NULL || seen == NULL || slot == NULL) {
    PyMem_Free(slot);
    PyErr_NoMemory();
    return -1;
  }
  size_t mask = 2 * (size_t)cap - 1;
  for (Py_ssize_t i = 0; i < g->n; i++) {
    size_t at = key_hash(&g->key[i * g->keys], g->keys) & mask;
    while (slot[at])
      at = (at + 1) & mask;
    slot[at] = i + 1;
  }
  PyMem_Free(g->slot);
  g->slot = slot;
  g->cap = cap;
  return 0;
}

/* The index of text column `c`'s value among the texts met: -1 when there are too many. */
static int text_index(Groups *g, sqlite3_stmt *st, int c) {
  const char *t = (const char *)sqlite3_column_text(st, c);
  Py_ssize_t n = sqlite3_column_bytes(st, c);
  if (t == NULL)
    return -1;
  for (int i = 0; i < g->texts; i++)
    if (g->text_len[i] == n && memcmp(g->text[i], t, (size_t)n) == 0)
      return i;
  if (g->texts == MAX_TEXTS)
    return -1;
  char *copy = PyMem_Malloc((size_t)n + 1);
  if (copy == NULL)
    return -1;
  memcpy(copy, t, (size_t)n);
  g->text[g->texts] = copy;
  g->text_len[g->texts] = n;
  return g->texts++;
}

/* Adds the current row: 0, 1: a value it cannot take (None), -1: error set. */
static int add_row(Groups *g, sqlite3_stmt *st) {
  long long k[MAX_KEYS];
  for (int c = 0; c < g->keys; c++) {
    int type = sqlite3_column_type(st, c);
    if (type == SQLITE_INTEGER && g->types[c] == 'i')
      k[c] = sqlite3_column_int64(st, c);
    else if (type == SQLITE_TEXT && g->types[c] == 't' && (k[c] = text_index(g, st, c)) >= 0)
      continue;
    else
      return 1;
  }
  if (groups_grow(g) < 0)
    return -1;
  size_t mask = 2 * (size_t)g->cap - 1, at = key_hash(k, g->keys) & mask;
  Py_ssize_t i;
  for (;; at = (at + 1) & mask) {
    if (g->slot[at] == 0) {  /* a new group */
      if (g->n == g->most)
        return 1;
      i = g->n++;
      g->slot[at] = i + 1;
      memcpy(&g->key[i * g->keys], k, (size_t)g->keys * sizeof *k);
      memset(&g->sum[i * g->sums], 0, (size_t)g->sums * sizeof *g->sum);
      memset(&g->seen[i * g->sums], 0, (size_t)g->sums);
      break;
    }
    i = g->slot[at] - 1;
    if (memcmp(&g->key[i * g->keys], k, (size_t)g->keys * sizeof *k) == 0)
      break;
  }
  for (int s = 0; s < g->sums; s++) {
    int c = g->keys + s, type = sqlite3_column_type(st, c);
    if (type == SQLITE_NULL)
      continue;
    if (type != SQLITE_INTEGER ||
        __builtin_add_overflow(g->sum[i * g->sums + s], sqlite3_column_int64(st, c), &g->sum[i * g->sums + s]))
      return 1;  /* SQLite's SUM fails on overflow too: its message comes from the reader's query */
    g->seen[i * g->sums + s] = 1;
  }
  return 0;
}

static const Groups *ordering;  /* what group_cmp compares (qsort takes no context; the GIL is held) */

static int group_cmp(const void *pa, const void *pb) {
  const Groups *g = ordering;
  const long long *a = &g->key[*(const Py_ssize_t *)pa * g->keys], *b = &g->key[*(const Py_ssize_t *)pb * g->keys];
  for (int c = 0; c < g->keys; c++) {
    long long x = g->types[c] == 't' ? g->rank[a[c]] : a[c], y = g->types[c] == 't' ? g->rank[b[c]] : b[c];
    if (x != y)
      return x < y ? -1 : 1;
  }
  return 0;
}

/* The texts' ranks in SQLite's BINARY order: bytes, then length. */
static void rank_texts(Groups *g) {
  for (int i = 0; i < g->texts; i++) {
    Py_ssize_t below = 0;
    for (int j = 0; j < g->texts; j++) {
      Py_ssize_t n = g->text_len[i] < g->text_len[j] ? g->text_len[i] : g->text_len[j];
      int c = memcmp(g->text[j], g->text[i], (size_t)n);
      below += c < 0 || (c == 0 && g->text_len[j] < g->text_len[i]);
    }
    g->rank[i] = below;
  }
}

/* The groups as a list of (keys..., sums...) tuples in key order, `texts` the key texts as
 * strs; NULL with an error set. */
static PyObject *groups_list(Groups *g, PyObject **texts) {
  PyObject *out = NULL;
  Py_ssize_t *order = PyMem_Malloc((size_t)(g->n > 0 ? g->n : 1) * sizeof *order);
  if (order == NULL)
    return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < g->n; i++)
    order[i] = i;
  rank_texts(g);
  ordering = g;
  qsort(order, (size_t)g->n, sizeof *order, group_cmp);
  if ((out = PyList_New(g->n)) == NULL)
    goto done;
  for (Py_ssize_t k = 0; k < g->n; k++) {
    Py_ssize_t i = order[k];
    PyObject *row = PyTuple_New(g->keys + g->sums);
    if (row == NULL) {
      Py_CLEAR(out);
      goto done;
    }
    PyList_SET_ITEM(out, k, row);
    for (int c = 0; c < g->keys + g->sums; c++) {
      PyObject *v;
      if (c < g->keys)
        v = g->types[c] == 't' ? Py_NewRef(texts[g->key[i * g->keys + c]])
                               : PyLong_FromLongLong(g->key[i * g->keys + c]);
      else
        v = g->seen[i * g->sums + c - g->keys] ? PyLong_FromLongLong(g->sum[i * g->sums + c - g->keys])
                                                : Py_NewRef(Py_None);
      if (v == NULL) {
        Py_CLEAR(out);
        goto done;
      }
      PyTuple_SET_ITEM(row, c, v);
    }
  }
done:
  PyMem_Free(order);
  return out;
}

static PyObject *summed(PyObject *self, PyObject *args) {
  (void)self;
  const char *uri, *sql, *types;
  PyObject *setup, *params;
  int keys;
  Py_ssize_t most;
  if (!PyArg_ParseTuple(args, "sO!sO!sin", &uri, &PyTuple_Type, &setup, &sql, &PyTuple_Type, &params, &types, &keys,
                        &most))
    return NULL;
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  Groups g = {0};
  PyObject *out = NULL;
  int rc = open_prepared(uri, setup, sql, params, &db, &st);
  if (rc == 0) {
    int columns = sqlite3_column_count(st);
    if (keys < 1 || keys > MAX_KEYS || columns - keys < 1 || columns - keys > MAX_SUMS ||
        strlen(types) != (size_t)columns) {
      PyErr_Format(PyExc_ValueError, "summed() takes 1-%d keys, 1-%d sums and a type a column", MAX_KEYS, MAX_SUMS);
      rc = -1;
    }
    g.keys = keys;
    g.sums = columns - keys;
    g.types = types;
    g.most = most;
  }
  int step = SQLITE_DONE;
  while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW)
    rc = add_row(&g, st);
  if (rc == 0 && step != SQLITE_DONE)
    rc = 1;
  PyObject *texts[MAX_TEXTS] = {0};
  for (int t = 0; rc == 0 && t < g.texts; t++)
    if ((texts[t] = PyUnicode_DecodeUTF8(g.text[t], g.text_len[t], "strict")) == NULL) {
      PyErr_Clear();  /* not UTF-8: the sqlite3 module's read says so */
      rc = 1;
    }
  if (rc == 0)
    out = groups_list(&g, texts);
  for (int t = 0; t < g.texts; t++)
    Py_XDECREF(texts[t]);
  sqlite3_finalize(st);
  sqlite3_close(db);
  groups_free(&g);
  if (rc < 0 || (rc == 0 && out == NULL))
    return NULL;
  if (rc > 0)
    Py_RETURN_NONE;
  return out;
}

static PyMethodDef methods[] = {
    {"grouped", grouped, METH_VARARGS,
     "grouped(uri, setup, sql, params, types, tagged) -> {key: [row, ...]} | None"},
    {"summed", summed, METH_VARARGS,
     "summed(uri, setup, sql, params, types, keys, most) -> [(key..., sum...), ...] | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "heapscope.store._rows", "A query's rows grouped by process, read in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
