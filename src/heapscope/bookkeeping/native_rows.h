/*
 * native_rows.h: the tracker's rows made into the lists the store's writer binds
 * (bookkeeping/dump.py: lifetime_values, memory_values), in C: a build's
 * ~250k lifetime rows and ~300k samples were a Python loop each.
 *
 * Each takes the packed rows of tracker.h's structs (the bytes Tracker
 * returns, mirrored in rows.py), so the row formats stay declared once.
 */
#ifndef HEAPSCOPE_NATIVE_ROWS_H
#define HEAPSCOPE_NATIVE_ROWS_H

#include <Python.h>
#include <stdint.h>

#include "resolver.h"

/* _native.lifetime_values(rows, kinds, life, sizes, size_kind): see _native.pyi. */
PyObject *hs_native_lifetime_values(PyObject *self, PyObject *args);

/* Resolver.sample_values' list: hs_sample_row rows of `buf` (`len` bytes) as (callsite, alloc_ts,
 * free_ts or None when it is `not_freed`, size, weight) a row, a callsite of 0 taken from `s` by
 * the row's stack, a row whose stack has none left out; NULL with an exception set. */
PyObject *hs_sample_values(const void *buf, Py_ssize_t len, uint64_t not_freed, const struct hs_resolver *s);

#endif /* HEAPSCOPE_NATIVE_ROWS_H */
