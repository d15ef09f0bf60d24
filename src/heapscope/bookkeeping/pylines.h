/* pylines.h: a CPython line table's line at an instruction offset, in C
 * (bookkeeping/pylines.py says the formats; their numbers are
 * enum hs_py_line_format of client/pyframes.h).
 *
 * The producer asks for one (code object, offset) at a time, the first time a
 * frame at that offset is resolved: a walk of the table up to the offset,
 * with no decoded ranges kept. In Python, decoding the whole table first cost
 * a multiprocessing Pool's four processes ~560 ms of the producer's loop
 * (1,965 tables, 342,000 varints), time in which no ring was drained and no
 * peak RSS read. */
#ifndef HEAPSCOPE_PYLINES_H
#define HEAPSCOPE_PYLINES_H

#include <stddef.h>
#include <stdint.h>

enum { HS_PYLINES_LNOTAB = 1, HS_PYLINES_310 = 2, HS_PYLINES_LOCATIONS = 3 };

/* 1 and *line: the line of the instruction at byte `offset` (a negative
 * offset: the first line, as in CPython); 0: that instruction has no line, or
 * the offset is past the table; -1: `fmt` is not a known format. */
int hs_pyline(int fmt, const uint8_t *table, size_t n, int64_t first_line, int64_t offset,
              int64_t *line);

#endif
