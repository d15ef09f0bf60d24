/*
 * The layout check of client/pyframes.c: built against one CPython's own
 * headers, it prints "field header_value table_value" for every offset and
 * size the walker's layout row uses. test_pyframes.py compares the columns.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#if PY_MINOR_VERSION >= 11
#include <internal/pycore_frame.h>
#endif
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "pyframes.h"

static int failures;

static void row(const char *name, long header, long table) {
  printf("%s %ld %ld\n", name, header, table);
  if (header != table) failures++;
}

#define F(name, type, field) row(#name, (long)offsetof(type, field), (long)t->name)

/* The bit positions the walker assumes for PyASCIIObject.state: kind in
 * bits 2-4, compact bit 5, ascii bit 6. */
static void state_bits(void) {
  PyASCIIObject o;
  unsigned int word;
  memset(&o, 0, sizeof o);
  o.state.kind = 7;
  memcpy(&word, &o.state, sizeof word);
  row("state_kind_mask", (long)word, 0x1cL);
  memset(&o, 0, sizeof o);
  o.state.compact = 1;
  memcpy(&word, &o.state, sizeof word);
  row("state_compact_mask", (long)word, 0x20L);
  memset(&o, 0, sizeof o);
  o.state.ascii = 1;
  memcpy(&word, &o.state, sizeof word);
  row("state_ascii_mask", (long)word, 0x40L);
}

int main(void) {
  const struct hs_py_layout *t = hs_py_layout_for(PY_MINOR_VERSION);
  static const struct hs_py_layout zero;
  if (t == NULL) {
    printf("missing-row %d 0\n", PY_MINOR_VERSION);
    t = &zero;
    failures++;
  }
  row("minor", PY_MINOR_VERSION, t->minor);
  F(ts_interp, PyThreadState, interp);
  F(ts_thread_id, PyThreadState, thread_id);
#if PY_MINOR_VERSION <= 10
  row("model", HS_PY_MODEL_FRAMEOBJECT, t->model);
  row("line_format", PY_MINOR_VERSION <= 9 ? HS_PY_LINES_LNOTAB : HS_PY_LINES_310,
      t->line_format);
  F(ts_frame, PyThreadState, frame);
  F(fr_back, PyFrameObject, f_back);
  F(fr_code, PyFrameObject, f_code);
  F(fr_instr, PyFrameObject, f_lasti);
  row("sizeof_f_lasti", (long)sizeof(((PyFrameObject *)0)->f_lasti), 4);
#else
  row("line_format", HS_PY_LINES_LOCATIONS, t->line_format);
  F(fr_back, _PyInterpreterFrame, previous);
  F(fr_owner, _PyInterpreterFrame, owner);
  row("sizeof_owner", (long)sizeof(((_PyInterpreterFrame *)0)->owner), 1);
  F(co_qualname, PyCodeObject, co_qualname);
  F(co_firsttraceable, PyCodeObject, _co_firsttraceable);
  F(co_code_adaptive, PyCodeObject, co_code_adaptive);
  row("owner_generator", FRAME_OWNED_BY_GENERATOR, 1);
#if PY_MINOR_VERSION <= 12
  row("model", HS_PY_MODEL_CFRAME, t->model);
  F(ts_frame, PyThreadState, cframe);
  F(cf_current, _PyCFrame, current_frame);
  F(fr_code, _PyInterpreterFrame, f_code);
  F(fr_instr, _PyInterpreterFrame, prev_instr);
#else
  row("model", HS_PY_MODEL_TSTATE, t->model);
  F(ts_frame, PyThreadState, current_frame);
  F(fr_code, _PyInterpreterFrame, f_executable);
  F(fr_instr, _PyInterpreterFrame, instr_ptr);
#endif
#if PY_MINOR_VERSION == 11
  F(fr_is_entry, _PyInterpreterFrame, is_entry);
  row("sizeof_is_entry", (long)sizeof(((_PyInterpreterFrame *)0)->is_entry), 1);
#else
  row("owner_cstack", FRAME_OWNED_BY_CSTACK, 3);
#endif
#endif
#if PY_MINOR_VERSION <= 9
  F(co_lines, PyCodeObject, co_lnotab);
#else
  F(co_lines, PyCodeObject, co_linetable);
#endif
  F(co_filename, PyCodeObject, co_filename);
  F(co_name, PyCodeObject, co_name);
  F(co_firstlineno, PyCodeObject, co_firstlineno);
  row("sizeof_co_firstlineno", (long)sizeof(((PyCodeObject *)0)->co_firstlineno), 4);
  F(ob_type, PyObject, ob_type);
  F(bytes_size, PyVarObject, ob_size);
  F(bytes_sval, PyBytesObject, ob_sval);
  F(str_length, PyASCIIObject, length);
  F(str_state, PyASCIIObject, state);
  row("str_ascii_size", (long)sizeof(PyASCIIObject), t->str_ascii_size);
  row("str_compact_size", (long)sizeof(PyCompactUnicodeObject), t->str_compact_size);
  row("sizeof_Py_UCS2", (long)sizeof(Py_UCS2), 2);
  state_bits();
  printf("failures %d\n", failures);
  return failures != 0;
}
