"""heapscope.records.Record: what a dataclass with slots gives, from fields written once."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import ClassVar

import pytest

from heapscope.records import Record, TupleRecord, field, replace


class Point(Record, frozen=True):
    x: int
    y: int
    label: str = ""
    LIMIT: ClassVar[int] = 10  # a class constant, not a field


class Tally(Record):
    name: str
    counts: list[int] = field(default_factory=list)
    total: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.total = sum(self.counts)


def test_the_annotations_are_the_slots_and_the_init() -> None:
    assert vars(Point)["__slots__"] == ("x", "y", "label")
    p = Point(1, 2)
    assert (p.x, p.y, p.label) == (1, 2, "")
    assert Point(1, y=2, label="a") == Point(1, 2, "a")
    assert Point.LIMIT == 10
    with pytest.raises(AttributeError):
        p.other = 1  # type: ignore[attr-defined]  # slots: no other attribute


def test_a_call_that_does_not_fit_the_fields_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="missing required argument: 'y'"):
        Point(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4"):
        Point(1, 2, "a", 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, 2, x=3)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, 2, z=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="not set by __init__"):
        replace(Tally("a"), total=3)


def test_a_frozen_record_hashes_its_fields_and_refuses_changes() -> None:
    p = Point(1, 2)
    assert hash(p) == hash(Point(1, 2)) and {p: 1}[Point(1, 2)] == 1
    with pytest.raises(AttributeError, match="frozen"):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del p.x
    assert replace(p, label="b") == Point(1, 2, "b") and p.label == ""


def test_a_mutable_record_compares_by_value_and_has_no_hash() -> None:
    a, b = Tally("a", [1, 2]), Tally("a", [1, 2])
    assert a == b and a is not b and a != Tally("b", [1, 2])
    assert a.total == 3  # __post_init__ ran
    assert Tally("c").counts is not Tally("c").counts  # a fresh list each
    a.counts.append(4)
    a.name = "z"
    assert a != b
    with pytest.raises(TypeError):
        hash(a)
    same_values: object = (1, 2, "")
    assert Point(1, 2) != same_values  # another class: never equal


def test_the_repr_is_a_dataclasss() -> None:
    assert repr(Point(1, 2, "a")) == "Point(x=1, y=2, label='a')"
    assert repr(Tally("a", [1])) == "Tally(name='a', counts=[1], total=1)"


def test_a_record_declares_no_slots_of_its_own_and_does_not_mix_frozen() -> None:
    with pytest.raises(TypeError, match="no __slots__"):
        class Slotted(Record):
            __slots__ = ("a",)
            a: int
    with pytest.raises(TypeError, match="field 'b' without a default follows"):
        class Ordered(Record):
            a: int = 0
            b: int  # type: ignore[misc]
    with pytest.raises(TypeError, match="do not mix"):
        class Thawed(Point):  # type: ignore[misc]
            z: int = 0


def test_a_subclass_adds_fields_after_its_bases_and_keeps_their_post_init() -> None:
    class Named(Tally):
        note: str = ""

    n = Named("a", [2, 3], "x")
    assert (n.name, n.counts, n.total, n.note) == ("a", [2, 3], 5, "x")
    assert vars(Named)["__slots__"] == ("note",)


class _Often(Record, frozen=True):
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: int = field(init=False, default=4)

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", self.a * 2)


def test_a_record_made_often_is_made_alike_through_its_compiled_init() -> None:
    # GIVEN records made by position, by keyword and with defaults, before and after the class's
    # __init__ is compiled for its fields (made 64 times)
    generic = _Often.__init__
    made = [(_Often(i), _Often(i, "x", [i]), _Often(a=i, c=[1])) for i in range(100)]
    # THEN it was compiled, and every record is the same whichever __init__ made it
    assert _Often.__init__ is not generic
    for i, (plain, full, named) in enumerate(made):
        assert (plain.a, plain.b, plain.c, plain.d) == (i, "b", [], 2 * i)
        assert (full.a, full.b, full.c, full.d) == (i, "x", [i], 2 * i)
        assert (named.a, named.b, named.c, named.d) == (i, "b", [1], 2 * i)
    assert made[-1][0].c is not made[-2][0].c  # a factory's value made anew each time
    # AND a wrong call is still refused
    bad: tuple[object, ...]
    for bad in ((), (1, "x", [], 4)):
        with pytest.raises(TypeError):
            _Often(*bad)
    with pytest.raises(TypeError):
        _Often(1, z=2)  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        made[0][0].a = 3  # type: ignore[misc]


_HOT_IN_A_FRESH_INTERPRETER = """
import gc
from heapscope.records import Record

def ast_types():
    return len([o for o in gc.get_objects() if isinstance(o, type) and o.__name__ == "FunctionDef"])

class Hot(Record, frozen=True):
    a: int
    b: str = ""

generic, before = Hot.__init__, ast_types()
made = [Hot(i) for i in range(200)]
print(Hot.__init__ is not generic, Hot.__init__.__code__.co_filename, ast_types() - before, made[-1].a)
"""


def test_compiling_a_hot_init_leaves_the_interpreters_ast_types_unmade() -> None:
    # GIVEN a fresh interpreter that makes a record class hot (its __init__ compiled)
    out = subprocess.run([sys.executable, "-c", _HOT_IN_A_FRESH_INTERPRETER], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    # THEN the init was compiled, named for its class in tracebacks, and the AST types (~1 ms of
    # set-up, which compile() does and exec of a str does not) were never made
    assert out == ["True", "<record", "Hot>", "0", "199"]


class Cell(TupleRecord):
    """A cell of a table."""

    row: int
    column: int
    text: str = ""

    def shown(self) -> str:
        return self.text.rjust(8)


def test_a_tuple_record_is_the_named_tuple_its_annotations_say() -> None:
    # GIVEN tuple rows made by position, by keyword and with a default
    a, b = Cell(1, 2, "x"), Cell(row=1, column=3)
    # THEN each is a tuple of its fields, in order, with the body's default, methods and docstring
    assert tuple(a) == (1, 2, "x") and b == (1, 3, "")
    row, column, text = a
    assert (row, column, text) == (1, 2, "x")
    assert Cell._fields == ("row", "column", "text") and Cell._field_defaults == {"text": ""}
    assert a.shown() == "       x"
    assert Cell.__doc__ == "A cell of a table." and Cell.__module__ == __name__
    assert repr(b) == "Cell(row=1, column=3, text='')" and a._replace(text="y").text == "y"
    assert pickle.loads(pickle.dumps(a)) == a


def test_a_tuple_record_refuses_a_field_without_default_after_one_with() -> None:
    with pytest.raises(TypeError, match="without a default follows"):
        class _Bad(TupleRecord):
            a: int = 0
            b: int  # type: ignore[misc]
    with pytest.raises(TypeError, match="has none"):
        class _Empty(TupleRecord):  # no annotation: no field to make a tuple of
            pass


_TUPLES_IN_A_FRESH_INTERPRETER = """
import gc, sys
from heapscope.records import TupleRecord

def ast_types():
    return len([o for o in gc.get_objects() if isinstance(o, type) and o.__name__ == "FunctionDef"])

before = ast_types()
class Row(TupleRecord):
    a: int
    b: "list[str] | None" = None
print(Row(1), ast_types() - before, "typing" in sys.modules)
"""


def test_a_tuple_record_is_made_without_typing_or_the_ast_types() -> None:
    # GIVEN a fresh interpreter that makes a tuple row class
    out = subprocess.run([sys.executable, "-c", _TUPLES_IN_A_FRESH_INTERPRETER], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    # THEN it imported no typing (~2 ms) and compiled no annotation (typing.NamedTuple makes a
    # ForwardRef of each, and the first compile() makes the AST types: ~1 ms)
    assert out == ["Row(a=1,", "b=None)", "0", "False"]
