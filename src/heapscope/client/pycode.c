/* pycode.c: copying a code object's names and line table out of the
 * interpreter (hs_py_code_key, hs_py_code_info: pyframes.h), with the same
 * validated loads as the walker (pyframes_rt.h). Hook-safe: plain loads,
 * no lock, no allocation. */
#include "pyframes_rt.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* Code objects (hook-safe)                                            */

/* Appends code point c as UTF-8; a lone surrogate U+DC80..U+DCFF (what
 * surrogateescape makes of an undecodable byte in a file name) becomes that
 * byte again, other surrogates U+FFFD. Returns 0 when it does not fit. */
static int put_utf8(char *buf, uint32_t cap, uint32_t *len, uint32_t c) {
  unsigned char b[4];
  uint32_t k;
  if (c >= 0xdc80 && c <= 0xdcff) {
    b[0] = (unsigned char)(c - 0xdc00);
    k = 1;
  } else {
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    if (c < 0x80) {
      b[0] = (unsigned char)c;
      k = 1;
    } else if (c < 0x800) {
      b[0] = (unsigned char)(0xc0 | (c >> 6));
      b[1] = (unsigned char)(0x80 | (c & 0x3f));
      k = 2;
    } else if (c < 0x10000) {
      b[0] = (unsigned char)(0xe0 | (c >> 12));
      b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
      b[2] = (unsigned char)(0x80 | (c & 0x3f));
      k = 3;
    } else {
      b[0] = (unsigned char)(0xf0 | (c >> 18));
      b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
      b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
      b[3] = (unsigned char)(0x80 | (c & 0x3f));
      k = 4;
    }
  }
  if (cap - *len < k) return 0;
  memcpy(buf + *len, b, k);
  *len += k;
  return 1;
}

/* Copies str object s as UTF-8. Returns -1 if s is not a str we can read,
 * 1 if it was cut, 0 otherwise. The layout of PyASCIIObject.state (bits:
 * interned 0-1, kind 2-4, compact 5, ascii 6) is the same in 3.8-3.13 and
 * is checked by the layout test. */
static int copy_str(uintptr_t s, char *buf, uint32_t cap, uint32_t *len) {
  const struct hs_py_layout *L = hs_py_rt.lay;
  *len = 0;
  if (!is_a(s, hs_py_rt.unicode_type)) return -1;
  intptr_t length = (intptr_t)load_ptr(s, L->str_length);
  uint32_t state = (uint32_t)load_i32(s, L->str_state);
  unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (length < 0 || (uintptr_t)length > MAX_STR_CHARS) return -1;
  if (kind != 1 && kind != 2 && kind != 4) return -1;
  uintptr_t data;
  if (compact) {
    data = s + (ascii ? L->str_ascii_size : L->str_compact_size);
  } else {
    /* A legacy (non-compact) str: PyUnicodeObject.data.any follows the
     * compact header. */
    data = load_ptr(s, L->str_compact_size);
    if (!ptr_ok(data, kind)) return -1;
  }
  if (buf == NULL) cap = 0;
  if (compact && ascii) {
    /* ASCII: the characters are the UTF-8 bytes (most names and paths). */
    uint32_t take = (uintptr_t)length > cap ? cap : (uint32_t)length;
    if (take > 0) memcpy(buf, (const void *)data, take);
    *len = take;
    return take < (uintptr_t)length;
  }
  for (intptr_t i = 0; i < length; i++) {
    uint32_t c;
    if (kind == 1) c = ((const volatile uint8_t *)data)[i];
    else if (kind == 2) c = ((const volatile uint16_t *)data)[i];
    else c = ((const volatile uint32_t *)data)[i];
    if (c > 0x10ffff) return -1;
    if (!put_utf8(buf, cap, len, c)) return 1;
  }
  return 0;
}

uint64_t hs_py_code_key(uint64_t code_addr) {
  if (hs_py_state() != HS_PY_SUPPORTED) return 0;
  const struct hs_py_layout *L = hs_py_rt.lay;
  uintptr_t code = (uintptr_t)code_addr;
  if (!is_a(code, hs_py_rt.code_type)) return 0;
  return key_of(L, code);
}

int hs_py_code_info(uint64_t code_addr, struct hs_py_code_info *out) {
  if (hs_py_state() != HS_PY_SUPPORTED) return -1;
  const struct hs_py_layout *L = hs_py_rt.lay;
  uintptr_t code = (uintptr_t)code_addr;
  if (!is_a(code, hs_py_rt.code_type)) return -1;
  out->truncated = 0;
  out->line_format = L->line_format;
  out->first_line = load_i32(code, L->co_firstlineno);
  uintptr_t name = load_ptr(code, L->co_qualname ? L->co_qualname : L->co_name);
  int r = copy_str(name, out->name, out->name_cap, &out->name_len);
  if (r < 0) return -1;
  if (r > 0) out->truncated |= 1;
  r = copy_str(load_ptr(code, L->co_filename), out->file, out->file_cap, &out->file_len);
  if (r < 0) return -1;
  if (r > 0) out->truncated |= 2;
  uintptr_t table = load_ptr(code, L->co_lines);
  if (!is_a(table, hs_py_rt.bytes_type)) return -1;
  intptr_t size = (intptr_t)load_ptr(table, L->bytes_size);
  if (size < 0 || (uintptr_t)size > MAX_CODE_UNITS) return -1;
  uint32_t take = (uint32_t)size;
  if (out->table == NULL) out->table_cap = 0;
  if (take > out->table_cap) {
    take = out->table_cap;
    out->truncated |= 4;
  }
  if (take > 0) memcpy(out->table, (const void *)(table + L->bytes_sval), take);
  out->table_len = take;
  return 0;
}
