/*
 * heapscope.symbolize._symtab: the defined functions of an ELF symbol table, for symtab.py.
 *
 *   functions(data, strtab, is64, little, entsize, thumb, section_ends)
 *       -> (starts, ends, name_offsets)
 *
 * `data` is the table's contents, `strtab` its linked string table, `entsize` the section's
 * (0: the class's own), `section_ends` {section index: its address + size}. Of the function and
 * ifunc entries with a section and a name, one per start address: the sized one first, then the
 * most visible binding (GLOBAL, WEAK, LOCAL), then the name with fewest leading underscores
 * (`malloc` over `__libc_malloc`), the first in the table on a tie. Sorted by start. A symbol's
 * end is start + size; one of size 0 ends at the next start, or 1 << 64, cut at the end of its
 * section. On ARM (`thumb`) bit 0 of an address selects Thumb mode and is dropped.
 *
 * Python read every entry through struct: cc1plus's table took ~30 ms a recording that named
 * one of its frames, on the producer's CPU while the target ran.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STT_FUNC 2
#define STT_GNU_IFUNC 10
#define SHN_UNDEF 0
#define SHN_LORESERVE 0xFF00

typedef struct {
  uint64_t value, size;
  uint32_t name;
  Py_ssize_t order;  /* the entry's place in the table: the first wins a tie */
  uint16_t shndx;
  int rank;        /* sized, binding, fewer underscores: higher is better */
} Candidate;

static uint64_t get(const unsigned char *p, int n, int little) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++)
    v |= (uint64_t)p[little ? i : n - 1 - i] << (8 * i);
  return v;
}

static int binding_rank(unsigned info) {
  switch (info >> 4) {
    case 1: return 2;  /* GLOBAL */
    case 2: return 1;  /* WEAK */
    default: return 0;
  }
}

static int leading_underscores(const unsigned char *strtab, Py_ssize_t len, uint32_t off) {
  int n = 0;
  while ((Py_ssize_t)off + n < len && strtab[(Py_ssize_t)off + n] == '_' && n < 0xFFFF)
    n++;
  return n;
}

static int by_start_then_rank(const void *a, const void *b) {
  const Candidate *x = a, *y = b;
  if (x->value != y->value)
    return x->value < y->value ? -1 : 1;
  if (x->rank != y->rank)
    return x->rank > y->rank ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* start + size as Python adds them: past 2**64 when the sum overflows. */
static PyObject *end_of(uint64_t start, uint64_t size) {
  if (start <= UINT64_MAX - size)
    return PyLong_FromUnsignedLongLong(start + size);
  PyObject *a = PyLong_FromUnsignedLongLong(start), *b = PyLong_FromUnsignedLongLong(size);
  PyObject *sum = a && b ? PyNumber_Add(a, b) : NULL;
  Py_XDECREF(a);
  Py_XDECREF(b);
  return sum;
}

/* A size-0 symbol's end: the next start (or `top`), cut at its section's end. */
static PyObject *open_end(const Candidate *c, const Candidate *next, PyObject *top, PyObject *section_ends) {
  PyObject *end = next ? PyLong_FromUnsignedLongLong(next->value) : Py_NewRef(top);
  if (end == NULL || c->shndx >= SHN_LORESERVE)
    return end;
  PyObject *key = PyLong_FromLong(c->shndx);
  PyObject *limit = key ? PyDict_GetItemWithError(section_ends, key) : NULL;
  Py_XDECREF(key);
  if (limit == NULL)
    return PyErr_Occurred() ? (Py_DECREF(end), NULL) : end;
  int less = PyObject_RichCompareBool(limit, end, Py_LT);
  if (less < 0) {
    Py_DECREF(end);
    return NULL;
  }
  if (less) {
    Py_DECREF(end);
    return Py_NewRef(limit);
  }
  return end;
}

static PyObject *build(const Candidate *cands, Py_ssize_t n, PyObject *section_ends) {
  PyObject *starts = PyList_New(0), *ends = PyList_New(0), *offsets = PyList_New(0);
  PyObject *top = end_of(UINT64_MAX, 1); /* 1 << 64 */
  PyObject *result = NULL;
  if (starts == NULL || ends == NULL || offsets == NULL || top == NULL)
    goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    const Candidate *c = &cands[i], *next = i + 1 < n ? &cands[i + 1] : NULL;
    PyObject *s = PyLong_FromUnsignedLongLong(c->value);
    PyObject *e = c->size ? end_of(c->value, c->size) : open_end(c, next, top, section_ends);
    PyObject *o = PyLong_FromUnsignedLong(c->name);
    int bad = s == NULL || e == NULL || o == NULL || PyList_Append(starts, s) < 0 || PyList_Append(ends, e) < 0 ||
              PyList_Append(offsets, o) < 0;
    Py_XDECREF(s);
    Py_XDECREF(e);
    Py_XDECREF(o);
    if (bad)
      goto done;
  }
  result = PyTuple_Pack(3, starts, ends, offsets);
done:
  Py_XDECREF(starts);
  Py_XDECREF(ends);
  Py_XDECREF(offsets);
  Py_XDECREF(top);
  return result;
}

/* The functions of the table (entries with a section and a name), the best alias of each start
 * only, sorted by start; *out NULL and -1 when memory ran out. Touches no Python object: run without the GIL
 * (record reads a table on a thread of its own while the producer goes on). */
static Py_ssize_t collect(const unsigned char *data, Py_ssize_t len, const unsigned char *strtab,
                          Py_ssize_t strtab_len, int is64, int little, Py_ssize_t entsize, int thumb,
                          Candidate **out) {
  const Py_ssize_t size = is64 ? 24 : 16;
  const Py_ssize_t stride = entsize > 0 ? entsize : size;
  const Py_ssize_t count = len >= size ? (len - size) / stride + 1 : 0;
  Candidate *cands = NULL;
  Py_ssize_t n = 0, cap = 0;
  for (Py_ssize_t k = 0; k < count; k++) {
    const unsigned char *p = data + k * stride;
    uint32_t name = (uint32_t)get(p, 4, little);
    unsigned info = is64 ? p[4] : p[12];
    uint16_t shndx = (uint16_t)get(p + (is64 ? 6 : 14), 2, little);
    uint64_t value = get(p + (is64 ? 8 : 4), is64 ? 8 : 4, little);
    uint64_t sz = get(p + (is64 ? 16 : 8), is64 ? 8 : 4, little);
    if (((info & 0xF) != STT_FUNC && (info & 0xF) != STT_GNU_IFUNC) || shndx == SHN_UNDEF || name == 0)
      continue;
    if (n == cap) {  /* grown as found: a damaged entsize can make `count` far more than the functions */
      Py_ssize_t more = cap ? cap * 2 : 1024;
      Candidate *grown = realloc(cands, (size_t)more * sizeof *cands);
      if (grown == NULL) {
        free(cands);
        *out = NULL;
        return -1;
      }
      cands = grown;
      cap = more;
    }
    if (thumb)
      value &= ~(uint64_t)1;
    int under = leading_underscores(strtab, strtab_len, name);
    cands[n++] = (Candidate){value, sz, name, k, shndx,
                             ((sz ? 1 : 0) << 20) | (binding_rank(info) << 17) | (0xFFFF - under)};
  }
  if (n > 1)
    qsort(cands, (size_t)n, sizeof *cands, by_start_then_rank);
  Py_ssize_t kept = 0; /* the best of each address, first after the sort: its aliases dropped */
  for (Py_ssize_t i = 0; i < n; i++)
    if (i == 0 || cands[i].value != cands[i - 1].value)
      cands[kept++] = cands[i];
  *out = cands;
  return kept;
}

static PyObject *functions(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer data, strtab;
  int is64, little, thumb;
  unsigned long long entsize_raw;
  Py_ssize_t n;
  PyObject *section_ends, *result = NULL;
  Candidate *cands;
  if (!PyArg_ParseTuple(args, "y*y*ppKpO!", &data, &strtab, &is64, &little, &entsize_raw, &thumb, &PyDict_Type,
                        &section_ends))
    return NULL;
  /* The file's sh_entsize, any u64: past the table's length, one entry is all there is room for. */
  Py_ssize_t entsize = entsize_raw > (unsigned long long)data.len ? data.len + 1 : (Py_ssize_t)entsize_raw;
  Py_BEGIN_ALLOW_THREADS
  n = collect(data.buf, data.len, strtab.buf, strtab.len, is64, little, entsize, thumb, &cands);
  Py_END_ALLOW_THREADS
  if (n < 0)
    PyErr_NoMemory();
  else
    result = build(cands, n, section_ends);
  free(cands);
  PyBuffer_Release(&data);
  PyBuffer_Release(&strtab);
  return result;
}

static PyMethodDef methods[] = {
    {"functions", functions, METH_VARARGS,
     "functions(data, strtab, is64, little, entsize, thumb, section_ends) -> (starts, ends, name_offsets)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_symtab", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__symtab(void) {
  return PyModule_Create(&module);
}
