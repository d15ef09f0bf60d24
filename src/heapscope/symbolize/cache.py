"""A per-user cache of symbols by build id: a module is symbolized once per machine.

`record` symbolizes the frames its profile uses; most of them are in the same
few libraries every time (libc, ld.so, libstdc++). This cache keeps, per
module (build id and path), which file symbolized it and the answer for every
address already asked, so the next recording answers those frames without
starting llvm-symbolizer or reading any debug info.

Where: $XDG_CACHE_HOME/heapscope (an absolute XDG_CACHE_HOME, else
~/.cache/heapscope; https://specifications.freedesktop.org/basedir-spec/latest/),
one JSON file per module. HEAPSCOPE_SYMBOL_CACHE=off disables it.

A module's file is read once per run and rewritten whenever the run answered a
new address in it (sampling meets a few new ones each time), so both stay
cheap: the source files are named once in a table and the answers refer to
them by index, and an answer is decoded only when an address asks for it
(libpython's entry of ~3,500 answers cost ~40 ms of Python a run, at the end
of `record`, when it was decoded and encoded whole).

An entry is used only when it still tells the truth:
  * every file the lookup consulted (locate.py's candidates, existing or not,
    and the debug files they led to) has the same identity as when the entry
    was written (device, inode, size, mtime, ctime; or is still missing), so a
    debug package installed since, or a rebuilt binary, makes it stale;
  * the tool and the lookup settings are the same (the context).
A stale entry is replaced by the next symbolization of that module.

Beside an entry, an empty `ask-BUILDID-...` file says that the last run that
used it (known before that run) still had to run llvm-symbolizer for new
addresses of its module (sampling meets new ones of a large library run after
run: libpython, ~10 a Python program's run):
the next recording has the tool read that module's debug info as soon as the
module is announced, so that a short program's new addresses cost no tool
start after its exit (70-300 ms for libpython). A run that needed no tool for
the module removes the file.

Files follow store/files.py's rules: the directory is a real directory (never a
symbolic link), ours, and writable by nobody else; entries are opened without
following links, must be regular files of ours, and are written whole to an
unpredictable name and renamed into place (a planted link at the name is
replaced, never written through). A damaged or foreign entry is ignored, a
damaged answer dropped (it is asked anew), and each entry counted (`corrupt`);
a directory that fails the checks disables the cache and says why (`refused`).
The cache is a speed-up: no failure of it ever fails symbolization.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat

from heapscope.records import Record, field

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:  # imported where used: `record` creates a cache before its target connects
    from collections.abc import Callable
    from typing import Any

    from heapscope.symbolize.llvm import SourceFrame
    from heapscope.symbolize.locate import Located

ENV_VAR = "HEAPSCOPE_SYMBOL_CACHE"
FORMAT = 2  # 1: each answer named its source file; still read
MAX_ENTRY_BYTES = 64 << 20  # a bigger file is not one we wrote: ignored, counted
MAX_FRAMES = 200_000  # addresses kept per module; beyond it new ones are not added
_BUILD_ID = re.compile(r"[0-9a-f]{8,128}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# One frame's answer: its inline chain (innermost first) and the symbol-table
# name found for it ("" when none was found, None when none was needed).
Answer = tuple[tuple["SourceFrame", ...], str | None]


def _sha256(data: bytes) -> Any:
    """hashlib.sha256(data): CPython's own SHA-256 when it has one; hashlib loads OpenSSL (~2 ms
    of CPU that `record` paid at its end for each module's cache file name)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]  # CPython 3.10, 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # CPython 3.12+
        except ImportError:
            from hashlib import sha256  # type: ignore[assignment,unused-ignore]
    return sha256(data)


class Answers:
    """rel_pc -> Answer, as read from an entry's file: an answer is checked and decoded when
    an address asks for it, and kept as stored otherwise (written back as it was read)."""

    def __init__(self, stored: dict[str, Any] | None = None, sources: list[str] | None = None) -> None:
        self._stored: dict[str, Any] = stored if stored is not None else {}  # hex pc -> [chain, name]
        self._sources: list[str] = sources if sources is not None else []  # a stored frame's file, by index
        self._source_ids: dict[str, int] | None = None  # built when an answer is added
        self._decoded: dict[int, Answer] = {}
        self.damaged = 0  # stored answers found not well formed (dropped)

    def get(self, pc: int) -> Answer | None:
        answer = self._decoded.get(pc)
        if answer is None:
            key = format(pc, "x")
            item = self._stored.get(key)
            if item is None:
                return None
            try:
                answer = self._decoded[pc] = _decode_answer(item, self._sources)
            except (ValueError, TypeError, IndexError):
                del self._stored[key]
                self.damaged += 1
                return None
        return answer

    def __contains__(self, pc: int) -> bool:
        return self.get(pc) is not None

    def __len__(self) -> int:
        return len(self._stored)

    def __setitem__(self, pc: int, answer: Answer) -> None:
        if self._source_ids is None:
            self._source_ids = {f: i for i, f in enumerate(self._sources)}
        ids = self._source_ids
        frames = []
        for f in answer[0]:
            i = ids.get(f.file)
            if i is None:
                i = ids[f.file] = len(self._sources)
                self._sources.append(f.file)
            frames.append([f.function, i, f.line])
        self._stored[format(pc, "x")] = [frames, answer[1]]
        self._decoded[pc] = answer

    def stored(self, drop: Callable[[int, str | None], bool] | None = None) -> tuple[dict[str, Any], list[str]]:
        """The answers and source table to write; `drop(pc, name)` leaves out an answer without
        frames that it says a range gives back."""
        if drop is None:
            return self._stored, self._sources
        return {k: v for k, v in self._stored.items()
                if not (isinstance(v, list) and len(v) == 2 and v[0] == [] and drop(int(k, 16), v[1]))}, self._sources


def _decode_answer(item: object, sources: list[str]) -> Answer:
    """One stored answer: [[[function, source index, line], ...], name]; format 1 (no `sources`)
    named the file itself."""
    from heapscope.symbolize.llvm import SourceFrame

    chain, name = _list(item)
    frames = []
    for frame in _list(chain):
        fn, fl, ln = _list(frame)
        frames.append(SourceFrame(_str(fn), sources[_index(fl)] if sources else _str(fl), _int(ln)))
    return tuple(frames), None if name is None else _str(name)


class Entry(Record):
    """What is known about one module: how it was located and the answers for its addresses."""

    path: str
    build_id: str
    context: str
    files: list[tuple[str, list[int] | None]]  # consulted file -> its identity when written (None: missing)
    located: Located
    answers: Answers = field(default_factory=lambda: Answers())  # rel_pc -> answer
    changed: bool = False  # answers added since it was read
    # A module without DWARF (located.status != "found"): every address's answer is its
    # symbol-table function, so one answer holds for the function's whole address range.
    ranges: dict[int, tuple[int, str]] = field(default_factory=dict)  # start -> (end, name or ""), [start, end)
    package: str | None = None  # the Debian package of `path` ("" none), None when not asked
    _starts: list[int] | None = field(init=False, default=None)  # sorted ranges, built on use

    def range_name(self, pc: int) -> str | None:
        """The symbol-table name ("": no symbol there) whose recorded range holds `pc`, None when none does."""
        if not self.ranges:
            return None
        if self._starts is None:
            self._starts = sorted(self.ranges)
        from bisect import bisect_right

        i = bisect_right(self._starts, pc) - 1
        if i < 0:
            return None
        end, name = self.ranges[self._starts[i]]
        return name if pc < end else None

    def add_range(self, start: int, end: int, name: str) -> None:
        if start < end and start not in self.ranges and len(self.ranges) < MAX_FRAMES:
            self.ranges[start] = (end, name)
            self._starts = None
            self.changed = True


def file_identity(path: str) -> list[int] | None:
    """What says a file is still the same one: device, inode, size, mtime, ctime; None when missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def default_dir() -> str | None:
    """$XDG_CACHE_HOME/heapscope, or ~/.cache/heapscope; None when disabled or there is no home."""
    if os.environ.get(ENV_VAR, "").lower() in ("off", "0", "no", "none"):
        return None
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the spec: a relative path is invalid and ignored
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "heapscope")  # not pathlib: ~3 ms of every recording's imports


class SymbolCache:
    """The cache of one run (one instance per symbolization); see the module's docstring."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = os.path.normpath(directory) if directory is not None else None
        self.hits = 0  # frames answered from the cache
        self.misses = 0  # frames of cacheable modules that had to be symbolized
        self._corrupt = 0  # entries ignored: unreadable, not ours, not well formed
        self.links = 0  # entries that were symbolic links (refused, never followed)
        self.write_errors = 0
        self.refused = ""  # why the cache is not used at all, "" when it is (or is off)
        self._fd: int | None = None
        self._opened = False
        self._looked: dict[tuple[str, str, str], Entry | None] = {}  # one read (and count) per module
        self.stored: set[tuple[str, str]] = set()  # (path, build id) of the entries written by this run

    @property
    def corrupt(self) -> int:
        """Entries ignored (unreadable, not ours, not well formed) or with an answer dropped as damaged."""
        return self._corrupt + sum(1 for e in self._looked.values() if e is not None and e.answers.damaged)

    # -- the directory -----------------------------------------------------------

    def _dir_fd(self) -> int | None:
        if not self._opened:
            self._opened = True
            if self.directory is not None:
                try:
                    self._fd = self._open_dir(self.directory)
                except OSError as e:
                    self.refused = f"{self.directory}: {e.strerror or e}"
        return self._fd

    def _open_dir(self, directory: str) -> int | None:
        """The cache directory, opened; created 0700 when missing. None (and `refused` says why)
        when it is a link, not ours or writable by others."""
        parent, name = os.path.split(directory)
        parent = parent or "."  # a relative directory's parent is the working directory
        with contextlib.suppress(FileExistsError):
            os.makedirs(parent, mode=0o700)
        # The parent (~/.cache) may be a link its owner made; it must end at a directory of ours
        # (or root's) that others cannot write into.
        pst = os.stat(parent)
        if not stat.S_ISDIR(pst.st_mode) or pst.st_uid not in (os.geteuid(), 0) or pst.st_mode & 0o022:
            self.refused = f"{parent} is not a private directory of this user"
            return None
        pfd = os.open(parent, _DIR_FLAGS)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=pfd)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    self.refused = f"{directory} is a symbolic link or not a directory; not used"
                    return None
                raise
        finally:
            os.close(pfd)
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            os.close(fd)
            self.refused = f"{directory} is not this user's, or others may write into it; not used"
            return None
        return fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- entries ---------------------------------------------------------------

    @staticmethod
    def cacheable(path: str, build_id: str) -> bool:
        return path.startswith("/") and _BUILD_ID.fullmatch(build_id) is not None

    @staticmethod
    def _name(path: str, build_id: str) -> str:
        where = _sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        return f"sym-{build_id}-{where}.json"

    @classmethod
    def _ask_name(cls, path: str, build_id: str) -> str:
        return "ask-" + cls._name(path, build_id).removeprefix("sym-").removesuffix(".json")

    def asked_last(self, path: str, build_id: str) -> bool:
        """Whether the last run that used this module's entry ran the tool for it (its
        `ask-` file is there): one stat, for each module a target announces."""
        if not self.cacheable(path, build_id):
            return False
        fd = self._dir_fd()
        if fd is None:
            return False
        try:
            st = os.stat(self._ask_name(path, build_id), dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()

    def note_asked(self, path: str, build_id: str, asked: bool) -> None:
        """Keep (asked) or drop the module's `ask-` file; a failure only loses the speed-up."""
        fd = self._dir_fd()
        if fd is None or asked == self.asked_last(path, build_id):
            return
        name = self._ask_name(path, build_id)
        with contextlib.suppress(OSError):
            if asked:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd))
            else:
                os.unlink(name, dir_fd=fd)

    def lookup(self, path: str, build_id: str, context: str) -> Entry | None:
        """The entry of this module when it is there and still true, else None (read once per run)."""
        key = (path, build_id, context)
        if key not in self._looked:
            self._looked[key] = self._lookup(path, build_id, context)
        return self._looked[key]

    def _lookup(self, path: str, build_id: str, context: str) -> Entry | None:
        if not self.cacheable(path, build_id):
            return None
        fd = self._dir_fd()
        if fd is None:
            return None
        raw = self._read(fd, self._name(path, build_id))
        if raw is None:
            return None
        try:
            entry = _decode(raw)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
            self._corrupt += 1
            return None
        if entry.path != path or entry.build_id != build_id:
            self._corrupt += 1
            return None
        if entry.context != context or any(file_identity(p) != ident for p, ident in entry.files):
            return None  # stale: the next symbolization rewrites it
        return entry

    def _read(self, fd: int, name: str) -> bytes | None:
        try:
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                self.links += 1
            else:
                self._corrupt += 1
            return None
        try:
            st = os.fstat(f)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_ENTRY_BYTES:
                self._corrupt += 1
                return None
            chunks = []
            while chunk := os.read(f, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError:
            self._corrupt += 1
            return None
        finally:
            os.close(f)

    def store(self, entry: Entry) -> None:
        """Write `entry` whole under an unpredictable name, then rename it into place."""
        fd = self._dir_fd()
        if fd is None:
            return
        import json

        data = json.dumps(_encode(entry), separators=(",", ":")).encode("utf-8", "surrogateescape")
        tmp = f".tmp-{os.urandom(8).hex()}"  # secrets.token_hex(8), without secrets' hmac and hashlib
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
            finally:
                os.close(out)
            os.replace(tmp, self._name(entry.path, entry.build_id), src_dir_fd=fd, dst_dir_fd=fd)
            self.stored.add((entry.path, entry.build_id))
        except OSError:
            self.write_errors += 1
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)

    def notes(self) -> list[str]:
        """One line per problem, for `record`'s summary."""
        lines = []
        if self.refused:
            lines.append(f"symbol cache not used: {self.refused}")
        if self.corrupt:
            lines.append(f"symbol cache: {self.corrupt} damaged or foreign entr{'ies' if self.corrupt > 1 else 'y'}"
                         f" ignored (in {self.directory})")
        if self.links:
            lines.append(f"symbol cache: {self.links} entr{'ies' if self.links > 1 else 'y'} that were symbolic"
                         f" links refused (in {self.directory})")
        return lines

    def stats_rows(self) -> list[tuple[str, int | None, str, str, int, str]]:
        """Rows for the profile's `stats` table."""
        where = str(self.directory) if self.directory is not None else "disabled"
        return [
            ("symbol_cache_hits", None, "info", "producer", self.hits,
             f"frames symbolized from the per-user symbol cache ({where})"),
            ("symbol_cache_misses", None, "info", "producer", self.misses,
             "frames of cacheable modules that were symbolized and added to the cache"),
            ("symbol_cache_corrupt", None, "error", "producer", self.corrupt,
             "symbol cache entries ignored: damaged, not ours, or not well formed (the frames were symbolized anew)"),
            ("symbol_cache_links_refused", None, "error", "producer", self.links,
             "symbol cache entries that were symbolic links: refused, never followed"),
            ("symbol_cache_refused", None, "error", "producer", int(bool(self.refused)),
             self.refused or "the symbol cache directory passed its checks (or the cache is off)"),
        ]


def _kept_answers(entry: Entry) -> tuple[dict[str, Any], list[str]]:
    """The answers a stored entry needs: without DWARF, one that a kept range gives back (its
    function's name, every address the same) is left out. symbolize_profile books the
    frames a range answered among the answers; stored, a compiler's entry grew to ~5,000 of
    them (330 KB of JSON encoded at the end of each `record` that met a new function)."""
    if not entry.ranges or entry.located.status == "found":
        return entry.answers.stored()
    return entry.answers.stored(lambda pc, name: entry.range_name(pc) == name)


def _encode(entry: Entry) -> dict[str, Any]:
    loc = entry.located
    answers, sources = _kept_answers(entry)
    return {
        "format": FORMAT,
        "path": entry.path,
        "build_id": entry.build_id,
        "context": entry.context,
        "files": [[p, ident] for p, ident in entry.files],
        "located": {"status": loc.status, "debug_file": loc.debug_file, "matched": loc.matched,
                    "symbol_files": loc.symbol_files, "mismatches": [list(m) for m in loc.mismatches]},
        "sources": sources,
        "answers": answers,
        "ranges": [[start, end, name] for start, (end, name) in entry.ranges.items()],
        "package": entry.package,
    }


def _str(v: object) -> str:
    if not isinstance(v, str):
        raise TypeError("not a string")
    return v


def _int(v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("not an integer")
    return v


def _list(v: object) -> list[Any]:
    if not isinstance(v, list):
        raise TypeError("not a list")
    return v


def _index(v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise TypeError("not an index")
    return v


_STATUSES = ("found", "no_debug_info", "not_found", "build_id_mismatch", "not_a_file")


def _decode(raw: bytes) -> Entry:
    """An entry from its file; ValueError/TypeError/KeyError when it is not one we would write."""
    import json

    from heapscope.symbolize.locate import Located

    d = json.loads(raw.decode("utf-8", "surrogateescape"))
    if not isinstance(d, dict) or d.get("format") not in (1, FORMAT):
        raise ValueError("not a symbol cache entry of this format")
    files: list[tuple[str, list[int] | None]] = []
    for item in _list(d["files"]):
        p, ident = _list(item)
        files.append((_str(p), None if ident is None else [_int(x) for x in _list(ident)]))
    loc = d["located"]
    if not isinstance(loc, dict) or loc["status"] not in _STATUSES:
        raise ValueError("bad located")
    located = Located(loc["status"], _str(loc["debug_file"]),
                      [_str(x) for x in _list(loc["matched"])], [_str(x) for x in _list(loc["symbol_files"])],
                      [(_str(a), _str(b)) for a, b in map(_list, _list(loc["mismatches"]))])
    table = d["answers"]
    if not isinstance(table, dict):
        raise TypeError("answers")
    if d["format"] == 1:  # each frame named its file: decoded whole, once, and written anew
        answers = Answers()
        for key, value in table.items():
            answers[int(_str(key), 16)] = _decode_answer(value, [])
    else:
        answers = Answers(table, [_str(f) for f in _list(d["sources"])])
    ranges: dict[int, tuple[int, str]] = {}
    for item in _list(d.get("ranges", [])):  # absent in entries written before ranges were kept
        start, end, name = _list(item)
        if not _int(start) < _int(end):
            raise ValueError("empty range")
        ranges[_int(start)] = (_int(end), _str(name))
    package = d.get("package")
    return Entry(_str(d["path"]), _str(d["build_id"]), _str(d["context"]), files, located, answers, ranges=ranges,
                 package=None if package is None else _str(package), changed=d["format"] != FORMAT)
