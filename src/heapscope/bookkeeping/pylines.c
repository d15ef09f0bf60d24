/* pylines.c: see pylines.h. The rules are those of each version's
 * PyCode_Addr2Line (Objects/codeobject.c; Objects/locations.md for 3.11+);
 * tests/unit/bookkeeping/test_pylines.py compares every offset of many code
 * objects with the interpreter's own answer, under every installed CPython. */
#include "pylines.h"

static int64_t int8(uint8_t b) { return b >= 128 ? (int64_t)b - 256 : (int64_t)b; }

/* 3.8, 3.9 co_lnotab: (address delta, line delta) pairs; the walk stops at
 * the first address past the offset. */
static int lnotab(const uint8_t *t, size_t n, int64_t line, int64_t offset, int64_t *out) {
  int64_t addr = 0;
  for (size_t i = 0; i + 1 < n; i += 2) {
    addr += t[i];
    if (addr > offset)
      break;
    line += int8(t[i + 1]);
  }
  *out = line;
  return 1;
}

/* 3.10 co_linetable: (range length, line delta) pairs; -128: no line. */
static int lines_310(const uint8_t *t, size_t n, int64_t line, int64_t offset, int64_t *out) {
  int64_t end = 0;
  for (size_t i = 0; i + 1 < n; i += 2) {
    int64_t start = end;
    end += t[i];
    int64_t delta = int8(t[i + 1]);
    if (delta != -128)
      line += delta;
    if (start <= offset && offset < end) {
      if (delta == -128)
        return 0;
      *out = line;
      return 1;
    }
  }
  return 0;
}

/* A varint of the location table: 6 bits a byte, bit 6 says more follow. A
 * read past the end gives 0 and moves *i past n (a cut table). */
static uint64_t varint(const uint8_t *t, size_t n, size_t *i) {
  uint8_t b = *i < n ? t[*i] : 0;
  (*i)++;
  uint64_t value = b & 63;
  unsigned shift = 6;
  while (b & 64) {
    b = *i < n ? t[*i] : 0;
    (*i)++;
    if (shift < 64)
      value |= (uint64_t)(b & 63) << shift;
    shift += 6;
  }
  return value;
}

static int64_t svarint(const uint8_t *t, size_t n, size_t *i) {
  uint64_t v = varint(t, n, i);
  return v & 1 ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
}

/* 3.11+ location table: entries of ((head & 7) + 1) code units; the kind in
 * bits 3-6 says how the line moves. A cut table keeps its whole entries. */
static int locations(const uint8_t *t, size_t n, int64_t line, int64_t offset, int64_t *out) {
  int64_t addr = 0;
  size_t i = 0;
  while (i < n) {
    uint8_t head = t[i++];
    unsigned kind = (head >> 3) & 15;
    int64_t length = ((int64_t)(head & 7) + 1) * 2;
    int has_line = 1;
    if (kind == 15) { /* no location */
      has_line = 0;
    } else if (kind == 14) { /* long form: line delta, end line delta, two columns */
      line += svarint(t, n, &i);
      for (int k = 0; k < 3; k++)
        (void)varint(t, n, &i);
    } else if (kind == 13) { /* no column: line delta only */
      line += svarint(t, n, &i);
    } else if (kind >= 10) { /* one-line form: line delta kind - 10, two column bytes */
      line += kind - 10;
      i += 2;
    } else { /* short form: same line, one column byte */
      i += 1;
    }
    if (i > n)
      return 0;
    if (addr <= offset && offset < addr + length) {
      if (!has_line)
        return 0;
      *out = line;
      return 1;
    }
    addr += length;
  }
  return 0;
}

int hs_pyline(int fmt, const uint8_t *table, size_t n, int64_t first_line, int64_t offset,
              int64_t *line) {
  if (fmt != HS_PYLINES_LNOTAB && fmt != HS_PYLINES_310 && fmt != HS_PYLINES_LOCATIONS)
    return -1;
  if (offset < 0) {
    *line = first_line;
    return 1;
  }
  switch (fmt) {
  case HS_PYLINES_LNOTAB:
    return lnotab(table, n, first_line, offset, line);
  case HS_PYLINES_310:
    return lines_310(table, n, first_line, offset, line);
  default:
    return locations(table, n, first_line, offset, line);
  }
}
