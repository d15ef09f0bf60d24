"""Typed records: each field written once, as an annotation of the class.

    class Frame(Record, frozen=True):
        mapping: MappingId
        rel_pc: int
        name: str = ""

A Record class gets what `@dataclass(slots=True)` (or `frozen=True` too)
would give it: `__slots__` from its annotations (ClassVar ones left out), an
`__init__` taking the fields in order, by position or name, then
`__post_init__()` when the class has one; `==` field by field with an instance
of the same class, a repr like a dataclass's. A frozen one also hashes its
fields and refuses assignment and deletion (AttributeError; its
`__post_init__` sets a derived field with `object.__setattr__`). A default is
written as the field's value, or `field(default_factory=list)`;
`field(init=False, ...)` keeps a field out of `__init__`. `replace(rec,
name=value)` is dataclasses.replace. mypy reads these classes as dataclasses
(dataclass_transform, PEP 681).

Why not dataclasses themselves: this is every class's one style, the ones
`record -- /bin/true` loads included, and there importing dataclasses and
generating each class's methods would cost more than the whole budget's
margin (docs/README.md, "The start path"). The methods are closures over the
class's fields; only a class made often (64 records) gets an `__init__`
compiled for its fields, as a dataclass's is.

Rows read by the hundred thousand are tuples: `class ViewValues(TupleRecord)`
is what `class ViewValues(typing.NamedTuple)` gives (mypy reads it as one),
made by `collections.namedtuple` without importing `typing` (~2 ms) or
compiling each annotation (typing does, and a process's first `compile()`
sets up the interpreter's AST types: ~1 ms). The reads behind `record`'s
summary use them.

May import: nothing of heapscope.
"""

from __future__ import annotations

from collections import namedtuple
from operator import attrgetter

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar
    from typing import NamedTuple as TupleRecord

    from typing_extensions import dataclass_transform

    R = TypeVar("R", bound="Record")
else:
    def dataclass_transform(**_kwargs):  # what mypy reads; nothing to do at run time
        return lambda cls: cls

__all__ = ["Record", "TupleRecord", "field", "replace"]

_MISSING = object()


class _Field:
    __slots__ = ("default", "factory", "init")

    def __init__(self, default: object, factory: Callable[[], object] | None, init: bool) -> None:
        self.default = default
        self.factory = factory
        self.init = init

    def value(self) -> object:
        return self.default if self.factory is None else self.factory()


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None, init: bool = True) -> Any:
    """A field's default made anew for each record (`default_factory`), or a field that
    `__init__` does not take (`init=False`: its default or factory gives its value)."""
    return _Field(default, default_factory, init)


def _is_class_var(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


class _RecordType(type):
    """Makes each Record class: slots, __init__, ==, hash and repr from its annotations."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any], frozen: bool = False) -> _RecordType:
        if not bases:
            return super().__new__(mcs, name, bases, ns)
        if "__slots__" in ns:
            raise TypeError(f"{name}: a Record's fields are its annotations; it has no __slots__ of its own")
        specs: dict[str, _Field] = {}
        for base in reversed(bases):
            inherited = getattr(base, "__record_fields__", {})
            specs.update(inherited)
            if inherited and base.__dict__["__record_frozen__"] != frozen:
                raise TypeError(f"{name}: frozen and mutable records do not mix")
        slots = []
        for n, annotation in ns.get("__annotations__", {}).items():
            if _is_class_var(annotation):
                continue
            if n not in specs:
                slots.append(n)
            value = ns.pop(n, _MISSING)
            specs[n] = value if isinstance(value, _Field) else _Field(value, None, True)
        ns["__slots__"] = tuple(slots)
        ns["__record_fields__"] = specs
        ns["__record_frozen__"] = frozen
        # The methods go in before the class is made (setting them on a class afterwards costs
        # more); __init__ learns the slot descriptors once they exist.
        post = ns.get("__post_init__")
        for base in bases:
            post = post or getattr(base, "__post_init__", None)
        finish = _add_methods(ns.get("__qualname__", name), ns, specs, frozen, post)
        cls = super().__new__(mcs, name, bases, ns)
        finish(cls)
        return cls


def _add_methods(label: str, ns: dict[str, Any], specs: dict[str, _Field], frozen: bool,
                 post: Callable[[object], None] | None) -> Callable[[type], None]:
    names = tuple(specs)
    taken = tuple(n for n in names if specs[n].init)
    given = tuple(specs[n] for n in taken)
    count = len(taken)
    seen_default = False
    for n, spec in zip(taken, given, strict=True):
        if spec.default is not _MISSING or spec.factory is not None:
            seen_default = True
        elif seen_default:
            raise TypeError(f"{label}: field {n!r} without a default follows one with a default")
    # Plain defaults of the last fields: a call by position that leaves them out needs no _bind.
    plain = 0
    while plain < count and given[count - plain - 1].factory is None \
            and given[count - plain - 1].default is not _MISSING:
        plain += 1
    tail = tuple(spec.default for spec in given[count - plain:])
    # Each field's slot descriptor sets it, whatever the class's __setattr__ (a frozen one's
    # refuses); filled in by finish() once the class exists.
    setters: tuple[Callable[[object, object], None], ...] = ()
    later: tuple[tuple[Callable[[object, object], None], _Field], ...] = ()

    calls = 0
    made: type | None = None  # the class, once finish() has it

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        nonlocal calls
        calls += 1
        if calls >= _HOT and made is not None and made.__dict__.get("__init__") is __init__:
            made.__init__ = _compiled_init(label, taken, given, setters, later, post)  # type: ignore[misc]
        if kwargs or len(args) != count:
            if not kwargs and count - plain <= len(args) < count:
                args += tail[len(args) - count:]
            else:
                args = _bind(label, taken, given, args, kwargs)
        for set_field, value in zip(setters, args, strict=True):
            set_field(self, value)
        for set_field, spec in later:
            set_field(self, spec.value())
        if post is not None:
            post(self)

    values: Callable[[object], object] = attrgetter(*names) if names else (lambda _self: ())

    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(values(self) == values(other))
        return NotImplemented

    def __repr__(self: object) -> str:
        shown = ", ".join([f"{n}={getattr(self, n)!r}" for n in names])
        return f"{self.__class__.__qualname__}({shown})"

    def __hash__(self: object) -> int:
        return hash(values(self))

    own: dict[str, Any] = {"__init__": __init__, "__eq__": __eq__, "__repr__": __repr__}
    if frozen:
        own["__hash__"] = __hash__
    for key, method in own.items():
        method.__qualname__ = f"{label}.{key}"
    if frozen:
        own.update(__setattr__=_refuse_set, __delattr__=_refuse_delete)
    elif "__eq__" not in ns:
        own["__hash__"] = None  # mutable and compared by value, like a dataclass
    own["__match_args__"] = taken
    for key, value in own.items():
        ns.setdefault(key, value)  # a class's own method stays

    def finish(cls: type) -> None:
        nonlocal setters, later, made
        setter: dict[str, Callable[[object, object], None]] = {}
        for klass in cls.__mro__:  # the class's own slots first, then its bases'
            for n in getattr(klass, "__slots__", ()):
                setter.setdefault(n, klass.__dict__[n].__set__)
        setters = tuple(setter[n] for n in taken)
        later = tuple((setter[n], specs[n]) for n in names if not specs[n].init)
        made = cls

    return finish


# Calls of a class's __init__ after which it is compiled for the class's own fields (_compiled_init).
_HOT = 64


def _compiled_init(label: str, taken: tuple[str, ...], given: tuple[_Field, ...],
                   setters: tuple[Callable[[object, object], None], ...],
                   later: tuple[tuple[Callable[[object, object], None], _Field], ...],
                   post: Callable[[object], None] | None) -> Callable[..., None]:
    """An __init__ with the fields as its parameters, as dataclasses writes one: Python binds
    the arguments (a call by keyword cost ~6x the compiled one through _bind). Made for a
    class at its _HOT-th record, so that the ~40 us of compiling it are paid only by classes
    made often, never on `record`'s start path. A wrong call's TypeError is Python's own."""
    env: dict[str, Any] = {"__hs_missing": _MISSING}
    params, body = [], []
    for i, (n, spec) in enumerate(zip(taken, given, strict=True)):
        env[f"__hs_set{i}"] = setters[i]
        if spec.factory is not None:
            env[f"__hs_make{i}"] = spec.factory
            params.append(f"{n}=__hs_missing")
            body.append(f"    __hs_set{i}(__hs_self, __hs_make{i}() if {n} is __hs_missing else {n})")
        else:
            if spec.default is not _MISSING:
                env[f"__hs_default{i}"] = spec.default
                params.append(f"{n}=__hs_default{i}")
            else:
                params.append(n)
            body.append(f"    __hs_set{i}(__hs_self, {n})")
    for j, (set_field, spec) in enumerate(later):
        env[f"__hs_later{j}"], env[f"__hs_value{j}"] = set_field, spec.value
        body.append(f"    __hs_later{j}(__hs_self, __hs_value{j}())")
    if post is not None:
        env["__hs_post"] = post
        body.append("    __hs_post(__hs_self)")
    source = f"def __init__(__hs_self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    # exec of the text, not of compile()'s code: compile() sets up the interpreter's AST types
    # first (~1 ms, once a process), which exec of a str never needs.
    exec(source, env)  # noqa: S102 - our own text, of identifiers
    init: Callable[..., None] = env["__init__"]
    init.__qualname__ = f"{label}.__init__"
    init.__code__ = init.__code__.replace(co_filename=f"<record {label}>")
    return init


def _refuse_set(self: object, name: str, _value: object) -> None:
    raise AttributeError(f"cannot assign to field {name!r} of a frozen {self.__class__.__qualname__}")


def _refuse_delete(self: object, name: str) -> None:
    raise AttributeError(f"cannot delete field {name!r} of a frozen {self.__class__.__qualname__}")


def _bind(label: str, taken: tuple[str, ...], given: tuple[_Field, ...], args: tuple[object, ...],
          kwargs: dict[str, object]) -> tuple[object, ...]:
    """The field values of a call with keywords, or fewer arguments than fields (defaults)."""
    if len(args) > len(taken):
        raise TypeError(f"{label}() takes {len(taken)} positional arguments but {len(args)} were given")
    values = list(args)
    for n, spec in zip(taken[len(args):], given[len(args):], strict=True):
        if n in kwargs:
            values.append(kwargs.pop(n))
        elif spec.default is not _MISSING or spec.factory is not None:
            values.append(spec.value())
        else:
            raise TypeError(f"{label}() missing required argument: {n!r}")
    for n in kwargs:
        raise TypeError(f"{label}() got multiple values for argument {n!r}" if n in taken
                        else f"{label}() got an unexpected keyword argument {n!r}")
    return tuple(values)


@dataclass_transform(eq_default=True, field_specifiers=(field,))
class Record(metaclass=_RecordType):
    """The base of every typed record (see the module's docstring)."""

    __slots__ = ()

    if TYPE_CHECKING:
        __record_fields__: dict[str, _Field]
        __record_frozen__: bool

        def __init_subclass__(cls, *, frozen: bool = False) -> None: ...


_namedtuple: Callable[..., Any] = namedtuple  # called with names made at run time, not literals

# Class attributes of a TupleRecord's body that are not copied onto the named tuple's class.
_TUPLE_OWN = frozenset({"__module__", "__qualname__", "__annotations__", "__static_attributes__", "__firstlineno__"})


class _TupleRecordType(type):
    """Makes each TupleRecord class: collections.namedtuple's class for the annotations, with the
    body's defaults, methods and docstring."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> Any:
        if not bases:
            return super().__new__(mcs, name, bases, ns)
        annotations = ns.get("__annotations__", {})
        fields = tuple(annotations)
        if not fields:  # e.g. annotations made lazily (PEP 649) without `from __future__ import annotations`
            raise TypeError(f"{name}: a TupleRecord's fields are its annotations, and it has none")
        defaults = [ns[n] for n in fields if n in ns]
        if any(n in ns for n in fields[:len(fields) - len(defaults)]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        cls = _namedtuple(name, fields, defaults=defaults, module=ns.get("__module__"))
        cls.__qualname__ = ns.get("__qualname__", name)
        cls.__annotations__ = dict(annotations)
        for key, value in ns.items():
            if key not in _TUPLE_OWN and key not in fields:
                setattr(cls, key, value)
        return cls


if not TYPE_CHECKING:
    class TupleRecord(metaclass=_TupleRecordType):
        """The base of a typed tuple row (see the module's docstring)."""


def replace(record: R, /, **changes: object) -> R:
    """A copy of `record` with the fields `changes` names set anew (dataclasses.replace)."""
    for n, spec in record.__record_fields__.items():
        if spec.init:
            changes.setdefault(n, getattr(record, n))
        elif n in changes:
            raise TypeError(f"replace(): field {n!r} is not set by __init__")
    return record.__class__(**changes)
