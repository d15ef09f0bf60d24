"""`heapscope record`'s usual command lines parsed without argparse (issue 13).

Importing argparse and building record's parser cost `record -- /bin/true`
~3 ms of CPU, of ~45 (benchmarks/RESULTS.md). The subcommand's own
`add_arguments(p)` is run on a `Spec` that notes each option instead of an
ArgumentParser, so both parsers read the same definitions; `parse` then
accepts only the plain forms, each option spelled out whole and a value as
the next word:

    heapscope [-v] record [-o FILE] [--force] [-q] ... [--] CMD ARGS...

and gives the Namespace argparse would give. Anything else (help, an error,
`--opt=value`, an abbreviation, `-qv`, a value that starts with `-`, two
options of one exclusive group, an option kind this module does not know) is
left to argparse: `parse` returns None, and every message stays argparse's.
tests/unit/cli/test_cli_quickparse.py compares the two on many command lines.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, issue 13)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType, SimpleNamespace
else:
    # types.SimpleNamespace, as types.py itself gets it, without importing types (start-up cost)
    SimpleNamespace = type(sys.implementation)

REMAINDER = "..."  # argparse.REMAINDER
MAIN_FLAGS = ("-v", "--verbose")  # the main parser's options that take no value (cli/__init__.py)
_ACTIONS = (None, "store", "store_true", "store_false", "append")
_KNOWN = {"action", "default", "type", "choices", "metavar", "help", "dest", "nargs"}


class _Option:
    __slots__ = ("dest", "action", "default", "convert", "choices", "group")

    def __init__(self, dest: str, action: str, default: object, convert: Callable[[str], object] | None,
                 choices: Sequence[str] | None, group: int) -> None:
        self.dest = dest
        self.action = action
        self.default = default
        self.convert = convert
        self.choices = choices
        self.group = group


class Spec:
    """Takes `add_argument` calls as an ArgumentParser would, and notes the options."""

    def __init__(self, group: int = 0, parent: Spec | None = None) -> None:
        self._root: Spec = parent or self
        self._group = group  # 0: none; else a mutually exclusive group's number
        if parent is None:
            self.options: dict[str, _Option] = {}  # by option string
            self.defaults: dict[str, object] = {}  # dest -> value when not given
            self.remainder: str | None = None  # the REMAINDER positional's dest
            self.groups = 0
            self.ok = True  # False: something only argparse knows; parse() declines

    def add_argument_group(self, *args: object, **kwargs: object) -> Spec:
        return Spec(self._group, self._root)  # titles only: the options parse the same

    def __getattr__(self, name: str) -> Callable[..., object]:
        """Any other ArgumentParser method: noted as something only argparse does."""
        if name.startswith("_"):
            raise AttributeError(name)
        self._root.ok = False
        return lambda *args, **kwargs: self

    def add_mutually_exclusive_group(self, required: bool = False) -> Spec:
        root = self._root
        root.groups += 1
        if required:
            root.ok = False
        return Spec(root.groups, root)

    def add_argument(self, *flags: str, **kwargs: object) -> None:
        root = self._root
        action = kwargs.get("action", "store")
        if not flags or set(kwargs) - _KNOWN or action not in _ACTIONS or root.remainder is not None:
            root.ok = False
            return
        if not flags[0].startswith("-"):  # a positional: only the trailing `command` REMAINDER
            if len(flags) != 1 or kwargs.get("nargs") != REMAINDER or self._group:
                root.ok = False
                return
            root.remainder = str(kwargs.get("dest", flags[0]))
            root.defaults[root.remainder] = []
            return
        kind, listed = kwargs.get("type"), kwargs.get("choices")
        convert: Callable[[str], object] | None = int if kind is int else float if kind is float else None
        choices = tuple(listed) if isinstance(listed, (list, tuple)) else None
        default = kwargs.get("default", {"store_true": False, "store_false": True}.get(str(action)))
        if kwargs.get("nargs") is not None or (kind is not None and convert is None) \
                or (listed is not None and choices is None) or (action == "append" and default not in (None, [])) \
                or any(not f.startswith("-") or f in root.options for f in flags):
            root.ok = False
            return
        long = [f for f in flags if f.startswith("--")]
        dest = str(kwargs.get("dest") or (long or flags)[0].lstrip("-").replace("-", "_"))
        if isinstance(default, str) and convert is not None:  # argparse converts a string default
            default = convert(default)
        option = _Option(dest, str(action), default, convert, choices, self._group)
        for f in flags:
            root.options[f] = option
        root.defaults.setdefault(dest, default)


def parse(argv: Sequence[str], load: Callable[[str], ModuleType | None]) -> SimpleNamespace | None:
    """The Namespace of a plain `record` command line, or None: let argparse parse it."""
    i = 0
    verbose = False
    while i < len(argv) and argv[i] in MAIN_FLAGS:
        verbose = True
        i += 1
    if i >= len(argv) or argv[i] != "record":
        return None
    cmd = load("record")
    if cmd is None:
        return None
    spec = Spec()
    cmd.add_arguments(spec)
    if not spec.ok or spec.remainder is None:
        return None
    values: dict[str, object] = {}
    groups: dict[int, _Option] = {}  # exclusive group -> the option given
    i += 1
    while i < len(argv):
        arg = argv[i]
        if not arg:
            return None  # argparse has its own rules for an empty word
        if arg == "--" or not arg.startswith("-"):
            break  # the command: everything from here, "--" included (cli/record.py drops it)
        option = spec.options.get(arg)
        if option is None:
            return None
        if option.group and groups.setdefault(option.group, option) is not option:
            return None  # two options of one exclusive group: argparse's error
        if option.action == "store_true":
            values[option.dest] = True
        elif option.action == "store_false":
            values[option.dest] = False
        else:
            i += 1
            if i >= len(argv) or argv[i].startswith("-"):
                return None
            value: object = argv[i]
            if option.convert is not None:
                try:
                    value = option.convert(argv[i])
                except (TypeError, ValueError):
                    return None
            if option.choices is not None and value not in option.choices:
                return None
            if option.action == "append":
                earlier = values.get(option.dest, option.default)  # argparse appends to a copy
                values[option.dest] = [*(earlier if isinstance(earlier, list) else ()), value]
            else:
                values[option.dest] = value
        i += 1
    namespace = SimpleNamespace(command=list(argv[i:]), verbose=verbose, _main=cmd.main)
    for dest, default in spec.defaults.items():
        if dest != spec.remainder:
            setattr(namespace, dest, values.get(dest, default))
    return namespace
