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
 * needs no pass of its own over the rows to check their types first. A build's flamegraph reads ~300k memory samples and ~130k size rows: through the
 * sqlite3 module, a Python tuple a row and a loop to sort them into processes took 2-3 times
 * what SQLite took to step them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <sqlite3.h>
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

static PyObject *grouped(PyObject *self, PyObject *args) {
  (void)self;
  const char *uri, *sql, *types;
  PyObject *setup, *params;
  int tagged;
  if (!PyArg_ParseTuple(args, "sO!sO!sp", &uri, &PyTuple_Type, &setup, &sql, &PyTuple_Type, &params, &types,
                        &tagged))
    return NULL;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(setup); i++)
    if (!PyUnicode_Check(PyTuple_GET_ITEM(setup, i)))
      return PyErr_Format(PyExc_TypeError, "grouped() runs statements given as strs");
  sqlite3 *db = NULL;
  Reader r = {0};
  PyObject *out = NULL;
  int rc = 1;
  if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK)
    goto done;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(setup); i++) {
    const char *statement = PyUnicode_AsUTF8(PyTuple_GET_ITEM(setup, i));
    if (statement == NULL) {
      rc = -1;
      goto done;
    }
    if (sqlite3_exec(db, statement, NULL, NULL, NULL) != SQLITE_OK)
      goto done;
  }
  if (sqlite3_prepare_v2(db, sql, -1, &r.st, NULL) != SQLITE_OK)
    goto done;
  r.columns = sqlite3_column_count(r.st);
  r.types = types;
  if (r.columns < (tagged ? 3 : 2) || r.columns > MAX_COLUMNS || strlen(types) != (size_t)r.columns) {
    PyErr_Format(PyExc_ValueError, "grouped() has %zu column types for a query of %d columns", strlen(types),
                 r.columns);
    rc = -1;
    goto done;
  }
  rc = bind(r.st, params);
  if (rc != 0)
    goto done;
  out = PyDict_New();
  rc = out == NULL ? -1 : read_rows(&r, out, tagged);
done:
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

static PyMethodDef methods[] = {
    {"grouped", grouped, METH_VARARGS,
     "grouped(uri, setup, sql, params, types, tagged) -> {key: [row, ...]} | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "heapscope.store._rows", "A query's rows grouped by process, read in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
