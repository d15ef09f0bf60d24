"""store.tree: the callsite table's rows taken as read when `record` wrote them so (its C
loop, _callsites.c), else left to the checked conversions; a chain deeper than any stack is
damage either way."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from heapscope.errors import ProfileError
from heapscope.model import Frame, Mapping, MappingId
from heapscope.store._callsites import plain_rows, read_table
from heapscope.store.reader import open_profile
from heapscope.store.tree import MAX_CALLSITE_DEPTH, plain_callsites
from heapscope.store.values import BadValue
from heapscope.store.writer import ProfileWriter


def test_plain_rows_give_the_tree_and_its_depth() -> None:
    # 1 ─ 2 ─ 3, 4 under 1, and 9 under 7, which is not a row (a dangling parent: a root)
    rows: list[tuple[object, ...]] = [(1, None, 10), (2, 1, 11), (3, 2, 12), (4, 1, 13), (9, 7, 14)]
    assert plain_rows(rows) == ({1: (None, 10), 2: (1, 11), 3: (2, 12), 4: (1, 13), 9: (7, 14)}, 2)
    assert plain_rows([]) == ({}, -1)
    # ids far apart, or below 0, as well as ids numbered from 1
    far: list[tuple[object, ...]] = [(1, None, 1), (10**12, 1, 2), (10**12 + 1, 10**12, 3)]
    assert plain_rows(far) == ({1: (None, 1), 10**12: (1, 2), 10**12 + 1: (10**12, 3)}, 2)
    assert plain_rows([(-5, None, 1), (-2, -5, 2), (3, -2, 3)]) == ({-5: (None, 1), -2: (-5, 2), 3: (-2, 3)}, 2)
    assert plain_callsites([]) == {}


@pytest.mark.parametrize("row", [
    (2, 2, 10),  # its own parent
    (2, 3, 10),  # a parent after it
    ("2", 1, 10), (2, "1", 10), (2, 1, "10"),  # text where an integer belongs
    (True, None, 10), (2, 1, 10.0),  # a bool, a float
    (2, 1),  # not a row of three
])
def test_a_row_not_as_record_writes_them_is_left_to_the_checks(row: tuple[object, ...]) -> None:
    assert plain_rows([(1, None, 10), row]) is None
    assert plain_callsites([(1, None, 10), row]) is None


def test_a_chain_deeper_than_any_stack_is_damage() -> None:
    rows: list[tuple[object, ...]] = [(1, None, 1)] + [(i, i - 1, 1) for i in range(2, MAX_CALLSITE_DEPTH + 2)]
    got = plain_rows(rows[:-1])
    assert got is not None and got[1] == MAX_CALLSITE_DEPTH - 1
    assert len(plain_callsites(rows[:-1]) or {}) == MAX_CALLSITE_DEPTH
    with pytest.raises(BadValue, match="frames deep"):
        plain_callsites(rows)


def test_the_table_read_from_the_file_is_what_the_reader_reads(tmp_path: Path) -> None:
    # GIVEN a profile's callsite tree as `record` writes it
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("ab", 0, 0, 0x1000, 0x2000, 0, "/x"))])
    w.add_frames([(i, Frame(MappingId(1), i, f"f{i}")) for i in range(1, 5)])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3), (4, 1, 1, 4), (9, 0, 7, 4)])
    w.close()
    uri = f"{path.resolve().as_uri()}?mode=ro"
    # WHEN it is read in C, and through the reader
    got = read_table(uri)
    with open_profile(path) as prof:
        read = prof.callsites()
    # THEN both are the rows, with the deepest chain's depth
    assert got == ({1: (None, 1), 2: (1, 2), 3: (2, 3), 4: (1, 4), 9: (7, 4)}, 2)
    assert read == got[0]
    # AND a file that is no profile, or a row that is not as `record` writes them, is left to
    # the reader's own query (which says what is wrong)
    assert read_table(f"{(tmp_path / 'none.db').as_uri()}?mode=ro") is None
    db = sqlite3.connect(path)
    db.execute("UPDATE stack_profile_callsite SET parent_id = 'x' WHERE id = 3")
    db.commit()
    db.close()
    assert read_table(uri) is None
    with open_profile(path) as prof, pytest.raises(ProfileError):
        prof.callsites()
