"""Allocator wrappers, folded into their callers: the one list, and the fold every view shares.

A frame that only passes an allocation through (xmalloc, zmalloc, operator new,
sqlite3Malloc, g_malloc, PyMem_Malloc, ...) names no code to change: the line
to change is its caller's. So views fold such frames into their callers: a
stack main > parse > xmalloc reads main > parse, and what xmalloc held is
parse's self. The fold (store.tree.fold_tree, in C) gives the callsites it
moves to the profile's callsite overlay (Profile.overlay_callsites: read in
place of the profile's rows, in memory and, when a read needs it, in SQL, as
store.select.select_heap shadows the heap tables), so `report`, `leaks`,
`diff`, the flamegraph, the exports and `record`'s summary all read the same
folded stacks without knowing of it.

A folded callsite keeps its id (the heap tables' rows stay as they are) and
takes its caller's frame and parent:

    callsites                         folded
    [1] main ─ [2] parse ─ [3] xmalloc    [1] main ─ [2] parse
                                          [1] main ─ [3] parse   (same node in every merged tree)

WRAPPERS is the list, one regular expression a family, matched against a
frame's function name without its parameters and clone suffixes. A static
wrapper with no symbol (sqlite's sqlite3MemMalloc in a stripped library) is
named `lib+0x...` and so stays shown, under its library's name, until
`heapscope symbolize` names it; then it folds like the others.
A wrapper inlined into its caller (`xmalloc [inlined]` in parse's frame, from the
symbolizer's inlined frames) folds the same way: its symbol row is left out of a
temporary stack_profile_symbol, so parse holds the bytes at the line that called it.
`--keep-wrappers` shows them all; `--fold REGEX` adds a project's own.
docs/views.md says the same for users.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from functools import lru_cache

from heapscope.errors import ProfileError, UsageError
from heapscope.model import CallsiteId, FrameId
from heapscope.store.reader import Profile
from heapscope.store.tree import fold_tree
from heapscope.view.names import elide, without_return_type
from heapscope.view.names import template_spans as collapse_spans

#: Functions that only pass an allocation through, by family: a regular expression (full
#: matches) and the words one of which every name it matches holds: at its start (`^word`), at
#: its end (`word$`) or anywhere. A name with none of a family's words never runs its
#: expression (WrapperPattern).
WRAPPERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # libc's own entry points, as seen when a frame of them survives the client's skipping
    (r"(__libc_|__)?(malloc|calloc|realloc|reallocarray|memalign|valloc|pvalloc|aligned_alloc|posix_memalign)",
     ("alloc$", "reallocarray$", "memalign$")),
    (r"(__)?strn?dup",
     ("dup$",)),
    # C++: operator new / new[] (every overload, a class's own too) and the standard allocators
    (r"([\w:]+::)?operator new(\[\])?",
     ("operator new$", "operator new[]$")),
    (r"(std::|__gnu_cxx::)(__new_allocator|new_allocator|allocator|allocator_traits)<.*>::allocate",
     ("::allocate$",)),
    (r"std::_Vector_base<.*>::_M_allocate|std::_Rb_tree<.*>::_M_get_node"
     r"|std::__detail::_Hashtable_alloc<.*>::_M_allocate_(node|buckets)|std::_Hashtable<.*>::_M_allocate_buckets",
     ("_M_allocate", "_M_get_node")),
    # GNU/git/gcc: xmalloc and kin
    (r"x(malloc|mallocz|calloc|realloc|strdup|strndup|memdup|memdupz|zalloc|alloc)",
     ("^xmalloc", "^xcalloc", "^xrealloc", "^xstrdup", "^xstrndup", "^xmemdup", "^xzalloc", "^xalloc")),
    # gcc: its garbage collector's entry points and vec's reservation (as std::vector's _M_allocate);
    # libiberty's and glibc's obstacks; binutils' bfd and objalloc arenas
    (r"ggc_internal_(cleared_)?alloc|ggc_(alloc|realloc|cleared_alloc|alloc_cleared)\w*"
     r"|va_(heap|gc)::reserve|vec<.*>::reserve(_exact)?|vec_safe_reserve(_exact)?",
     ("^ggc_", "reserve$", "reserve_exact$")),
    (r"_obstack_(newchunk|begin|begin_1)|bfd_z?(alloc|malloc)|bfd_realloc(_or_free)?|_?objalloc_alloc",
     ("^_obstack_", "^bfd_", "objalloc_alloc$")),
    # redis
    (r"z(try)?(malloc|calloc|realloc)(_usable)?(_internal)?|zstrdup|zmalloc_no_tcache|zcalloc_num",
     ("^zmalloc", "^zcalloc", "^zrealloc", "^ztry", "^zstrdup")),
    # sqlite
    (r"sqlite3(_malloc(64)?|_realloc(64)?|Malloc|MallocZero|Realloc|MemMalloc|MemRealloc"
     r"|DbMalloc(Raw|RawNN|Zero|Size)?|DbRealloc|DbReallocOrFree|DbStrN?Dup|StrDup|DbSpanDup)",
     ("^sqlite3",)),
    # glib
    (r"g_(try_)?(malloc|malloc0|realloc)(_n)?|g_slice_alloc0?|g_strn?dup|g_memdup2?",
     ("^g_",)),
    # CPython's allocator domains and object allocators (a Python view hides them anyway)
    (r"_?PyMem_\w+|_?PyObject_(Malloc|Calloc|Realloc)|pymalloc_alloc|_PyObject_GC_(Alloc|New|NewVar|Link)"
     r"|PyObject_GC_(New|NewVar)|gc_alloc|_PyObject_New(Var)?|PyType_GenericAlloc|_PyType_AllocNoTrack",
     ("^PyMem_", "^_PyMem_", "^PyObject_", "^_PyObject_", "^pymalloc_alloc", "^gc_alloc", "^PyType_", "^_PyType_")),
    # jemalloc and tcmalloc entry points
    (r"je_\w*(alloc|allocx)|(mallocx|rallocx|xallocx)|imalloc(_body)?|malloc_default|tc_\w+",
     ("^je_", "allocx$", "^imalloc", "^malloc_default", "^tc_")),
    # node and V8: the ArrayBuffer allocator and the backing-store calls down to it (the row left
    # is the Buffer API that was called), V8's malloc with retry
    (r"node::NodeArrayBufferAllocator::(Allocate|AllocateUninitialized|Reallocate)"
     r"|v8::internal::Heap::AllocateExternalBackingStore|v8::internal::BackingStore::Allocate"
     r"|v8::ArrayBuffer::NewBackingStore(ForNodeLTS)?|v8::internal::(AllocWithRetry|AllocAtLeastWithRetry"
     r"|AlignedAllocWithRetry|AlignedAlloc)",
     ("^node::", "^v8::")),
    # V8's pages (the mmap heap: docs/mmap-heaps.md): the commit of a page and the chunk allocator
    # down to it (the row left is the space that grew: a semispace, a large object, a paged space)
    (r"v8::base::OS::(SetPermissions|Allocate|AllocateShared)|v8::base::PageAllocator::\w+"
     r"|v8::internal::MemoryAllocator::(AllocateAlignedMemory|AllocateUninitializedChunkAt|AllocateUninitializedChunk"
     r"|AllocatePage|AllocateLargePage|AllocateReadOnlyPage|CommitMemory)|v8::internal::VirtualMemory::\w+",
     ("^v8::",)),
    # OpenSSL, FFmpeg
    (r"CRYPTO_(malloc|zalloc|realloc|strdup|strndup|memdup)|av_(malloc|mallocz|realloc|strdup|memdup)",
     ("^CRYPTO_", "^av_")),
)

_CLONE = re.compile(r"( \[clone [^]]*\])+$|(\.(constprop|isra|part|cold|lto_priv|llvm)\.\d+)+$")


# Remembered: a compiler's deep stacks repeat the same long C++ names in every callsite, and
# the walk below is per character (record's summary spent seconds of cc1plus's run on it).
@lru_cache(maxsize=1 << 16)
def base_name(name: str) -> str:
    """A function's name as WRAPPERS match it: without its return type, parameter list,
    function template arguments and clone suffixes: `operator new(unsigned long)` ->
    `operator new`, `xmalloc.part.0` -> `xmalloc`, `T* std::_Hashtable_alloc<A>::_M_allocate_node<X>(X)`
    -> `std::_Hashtable_alloc<A>::_M_allocate_node`."""
    name = _CLONE.sub("", name.strip())
    for qualifier in (" const", " volatile", " &&", " &"):
        name = name.removesuffix(qualifier)
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            c = name[i]
            if c == ")":
                depth += 1
            elif c == "(":
                depth -= 1
                if depth == 0:
                    # `operator()(int)`: the first pair is the name's own
                    if not name[:i].endswith("operator"):
                        name = name[:i]
                    break
    name = without_return_type(_CLONE.sub("", name))
    if name.endswith(">") and not name.endswith(("operator>", "operator>>", "operator->")):
        spans = collapse_spans(name)
        if spans and spans[-1][1] == len(name) - 1:
            name = name[:spans[-1][0]]
    return name


UNION_AFTER = 512  # names asked before one expression of all is cheaper than the words' tests


class WrapperPattern:
    """A full match of a base name against WRAPPERS' families (or some of them) and --fold's
    own expressions. A family's expression is compiled the first time a name holds one of its
    words, and all of them as one once many names have been asked: compiling the sixteen took
    ~6 ms of every recording's summary, which asks a few dozen names of one or two families."""

    __slots__ = ("_families", "_compiled", "_words", "_all_words", "_answers", "_union", "_union_after")

    def __init__(self, families: Sequence[tuple[str, tuple[str, ...]]], union_after: int = UNION_AFTER) -> None:
        self._families = tuple(families)
        self._union_after = union_after
        self._compiled: list[re.Pattern[str] | None] = [None] * len(self._families)
        # Each family's words as str methods take them: (prefixes, suffixes, anywhere)
        self._words = [(tuple(w[1:] for w in words if w.startswith("^")),
                        tuple(w[:-1] for w in words if w.endswith("$") and not w.startswith("^")),
                        tuple(w for w in words if not w.startswith("^") and not w.endswith("$")))
                       for _regex, words in self._families]
        # All families' words at once, when each family has some: a name with none of them (most
        # names) is no family's, told in three calls rather than three a family (a summary's 87
        # names took ~1 ms). None when a family (--fold's) is tried on every name.
        self._all_words: tuple[tuple[str, ...], ...] | None = None
        if all(words for _regex, words in self._families):
            self._all_words = tuple(tuple(w for family in self._words for w in family[k]) for k in range(3))
        self._answers: dict[str, bool] = {}  # a summary's stacks share most of their frames
        self._union: re.Pattern[str] | None = None

    def fullmatch(self, name: str) -> bool:
        """Whether `name` (a base_name) is one of the functions to fold."""
        if self._union is not None:
            return self._union.fullmatch(name) is not None
        known = self._answers.get(name)
        if known is not None:
            return known
        if len(self._answers) < self._union_after:
            known = self._answers[name] = self._by_family(name)
            return known
        self._union = re.compile("|".join(f"(?:{regex})" for regex, _words in self._families))
        self._answers.clear()
        return self.fullmatch(name)

    def _by_family(self, name: str) -> bool:
        if self._all_words is not None:
            starts, ends, anywhere = self._all_words
            if not (name.startswith(starts) or name.endswith(ends) or any(w in name for w in anywhere)):
                return False
        for i, (regex, words) in enumerate(self._families):
            if words:
                starts, ends, anywhere = self._words[i]
                if not (name.startswith(starts) or name.endswith(ends) or any(w in name for w in anywhere)):
                    continue
            compiled = self._compiled[i]
            if compiled is None:
                compiled = self._compiled[i] = re.compile(regex)
            if compiled.fullmatch(name) is not None:
                return True
        return False


def wrapper_pattern(keep: bool = False, extra: Sequence[str] = ()) -> WrapperPattern | None:
    """The functions to fold: WRAPPERS (unless `keep`) and the `extra` ones (--fold, tried on
    every name); None when nothing is folded. UsageError for an extra that is not a regex."""
    families = [] if keep else list(WRAPPERS)
    for regex in extra:
        try:
            re.compile(regex)
        except re.error as e:
            raise UsageError(f"--fold {regex!r}: not a regular expression ({e})") from e
        families.append((regex, ()))
    return WrapperPattern(families) if families else None


def is_wrapper(name: str, pattern: WrapperPattern | None = None) -> bool:
    """Whether the function `name` is folded by `pattern` (default: WRAPPERS)."""
    pattern = pattern if pattern is not None else wrapper_pattern()
    return pattern is not None and pattern.fullmatch(base_name(name))


def fold_wrappers(profile: Profile, keep: bool = False, extra: Sequence[str] = ()) -> list[str]:
    """Make every later read of `profile`'s stacks see wrappers folded into their callers
    (the module's doc); returns the names folded (base names, sorted), [] when none.

    Call it before anything reads the profile's callsites (they are cached).
    A stack made of wrappers only is left as it is: there is no caller to fold into.
    """
    with profile.reading():  # a damaged file fails in its first statement here: one line, as any reader's
        return _fold_wrappers(profile, keep, extra)


def _fold_wrappers(profile: Profile, keep: bool, extra: Sequence[str]) -> list[str]:
    db = profile.sql_connection()
    profile.drop_callsite_overlay()
    db.execute("DROP TABLE IF EXISTS temp.stack_profile_symbol")
    pattern = wrapper_pattern(keep, extra)
    if pattern is None:
        return []
    inlined = _fold_inlined(profile, db, pattern)
    names: dict[FrameId, str] = {}
    for fid, info in profile.frames().items():
        if info.name:
            base = base_name(info.name)
            if pattern.fullmatch(base):
                names[fid] = base
    if not names:
        return sorted(inlined)
    callsites = profile.callsites()
    got = fold_tree(callsites, set(names))  # in C: a compiler build has ~450k callsites
    if got is None:  # not as `record` writes them (parents below their children): walked here
        folded, rows = _fold(callsites, names)
        moved, depths = {cs: (par, fid) for cs, _, par, fid in rows}, [depth for _, depth, _, _ in rows]
    else:
        moved, depths, frames = got
        folded = {names[f] for f in frames}
    if folded:
        profile.overlay_callsites(moved, depths)
    return sorted(folded | inlined)


def _fold_inlined(profile: Profile, db: sqlite3.Connection, pattern: WrapperPattern) -> set[str]:
    """Fold wrappers inlined into a frame's function (`xmalloc [inlined]` in parse's frame, from
    the symbolizer's inlined frames): their symbol rows are left out of a temporary
    stack_profile_symbol that shadows the profile's, so what they held is the self of the
    function they were inlined into, at the line that called them. A set's last row (the
    frame's own function) stays: a wrapper frame is folded by its callsites. Returns the names."""
    try:
        rows = db.execute("SELECT id, symbol_set_id, name FROM main.stack_profile_symbol"
                          " ORDER BY symbol_set_id, id").fetchall()
    except sqlite3.DatabaseError as e:
        raise ProfileError(f"{profile.path}: {e}") from e
    matched: dict[str, str | None] = {}  # name -> its base name when a wrapper, else None
    dropped: list[int] = []
    folded: set[str] = set()
    for k, (sid, set_id, name) in enumerate(rows):
        last = k + 1 == len(rows) or rows[k + 1][1] != set_id  # the set's outermost: the frame's own
        if last or not name:
            continue
        if name not in matched:
            bare = base_name(str(name))
            matched[name] = bare if pattern.fullmatch(bare) else None
        wrapper = matched[name]
        if wrapper is not None:
            dropped.append(sid)
            folded.add(wrapper)
    if dropped:
        db.execute("CREATE TEMP TABLE stack_profile_symbol AS SELECT * FROM main.stack_profile_symbol")
        db.executemany("DELETE FROM temp.stack_profile_symbol WHERE id = ?", ((i,) for i in dropped))
    return folded


def _fold(callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]], wrappers: dict[FrameId, str]
          ) -> tuple[set[str], list[tuple[CallsiteId, int, CallsiteId | None, FrameId]]]:
    """The folded callsite rows (id, depth, parent, frame) and the wrapper names folded, walked
    whatever the ids' order (store.tree.fold_tree needs each parent's id below its child's)."""
    limit = len(callsites) + 1  # a parent cycle (damage) ends the walk: the callsite stays as it is
    # caller[c]: the nearest callsite at or above c whose frame is not a wrapper (None: all wrappers)
    caller: dict[CallsiteId, CallsiteId | None] = {}
    for start in callsites:
        chain: list[CallsiteId] = []
        node: CallsiteId | None = start
        found: CallsiteId | None = None
        while node is not None and node in callsites and len(chain) < limit:
            if node in caller:
                found = caller[node]
                break
            if callsites[node][1] not in wrappers:
                found = node
                break
            chain.append(node)
            node = callsites[node][0]
        for c in chain:
            caller[c] = found
        if start not in caller:
            caller[start] = found
    folded: set[str] = set()
    new: dict[CallsiteId, tuple[CallsiteId | None, FrameId]] = {}
    for cs, (par, fid) in callsites.items():
        d = caller.get(cs)
        if d is None:  # only wrappers from here to the root: shown as they are
            new[cs] = (par, fid)
            continue
        if d != cs:
            folded.add(wrappers[fid])
        p = callsites[d][0]
        new[cs] = (caller.get(p) if p is not None and p in callsites else None, callsites[d][1])
    depth: dict[CallsiteId, int] = {}
    out: list[tuple[CallsiteId, int, CallsiteId | None, FrameId]] = []
    for cs, (par, fid) in new.items():
        chain = []
        up: CallsiteId | None = cs
        while up is not None and up not in depth and up in new and len(chain) < limit:
            chain.append(up)
            up = new[up][0]
        base = depth.get(up, -1) if up is not None else -1
        for c in reversed(chain):
            base += 1
            depth[c] = base
        out.append((cs, depth.get(cs, 0), par, fid))
    return folded, out


def fold_line(folded: Iterable[str], width: int = 120) -> str:
    """The header line naming the wrappers folded, within `width` columns (template arguments
    elided, as many names as fit, then how many more); '' when none were."""
    names = list(dict.fromkeys(elide(name, 48) for name in folded))
    if not names:
        return ""
    head, tail = "wrappers folded into their callers: ", " (--keep-wrappers shows them)"
    shown: list[str] = []
    for k, name in enumerate(names):
        more = f" and {len(names) - k - 1} more" if k + 1 < len(names) else ""
        if shown and len(head + ", ".join([*shown, name]) + more + tail) > width:
            break
        shown.append(name)
    rest = len(names) - len(shown)
    return head + ", ".join(shown) + (f" and {rest} more" if rest else "") + tail
