"""Bases for the small record classes on `heapscope record`'s start-up path.

A `@dataclass` compiles its generated methods with exec() when its module
loads (0.3-0.6 ms of CPU a class for the frozen, slotted ones, measured on
this project's 2-core machine), and importing dataclasses pulls in inspect,
ast and dis: with ~30 of them, that was a large part of `record`'s fixed
cost (issue 13, benchmarks/RESULTS.md). These bases give what the dataclasses
gave, from the class's own `__slots__` (its fields, in order):

- Slots: `==` field by field with an instance of the same class, a repr like
  a dataclass's (`Name(a=1, b='x')`), and no hash (a mutable record);
- FrozenSlots: also a hash of the fields, and assigning or deleting an
  attribute raises AttributeError; `__init__` sets the fields with
  `object.__setattr__` (as a frozen dataclass's does).

Each class writes its own `__init__` (defaults, checks). A class with these
bases does not subclass another record class: `__slots__` lists every field.

May import: nothing of heapscope.
"""

from __future__ import annotations

from operator import attrgetter

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import ClassVar


class Slots:
    __slots__: ClassVar[tuple[str, ...]] = ()
    # The fields as a tuple, for == and hash: attrgetter of every slot (C code, as fast as
    # a dataclass's generated tuple). Called as `self.__class__._values(self)`.
    _values: ClassVar[Callable[[object], tuple[object, ...]]]

    def __init_subclass__(cls) -> None:
        names = cls.__slots__
        if len(names) == 1:
            one = attrgetter(names[0])
            cls._values = lambda self: (one(self),)
        elif names:
            cls._values = attrgetter(*names)
        else:
            cls._values = lambda self: ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            values = self.__class__._values
            return values(self) == values(other)
        return NotImplemented

    # No __hash__: Python sets it to None beside __eq__ (a dataclass with eq, not frozen).

    def __repr__(self) -> str:
        fields = ", ".join([f"{name}={getattr(self, name)!r}" for name in self.__slots__])
        return f"{self.__class__.__qualname__}({fields})"


class FrozenSlots(Slots):
    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self.__class__._values(self))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    # pickle and copy restore slots with setattr(), which the class refuses.
    def __getstate__(self) -> tuple[object, ...]:
        return self.__class__._values(self)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        names: tuple[str, ...] = self.__slots__
        for name, value in zip(names, state, strict=True):
            object.__setattr__(self, name, value)
