"""What a recording is missing, and what the user can do about it.

Three kinds of gaps that `record` names at its end (and `stats` keeps):
  * modules whose frames stayed unsymbolized (`git+0x1f120`), with the fix:
    the distribution's debug package (Debian's `PKG-dbgsym`, found with
    dpkg-query), a debuginfod server (DEBUGINFOD_URLS), or `heapscope symbolize
    --binary-path`; and code in no loaded object (JIT) that no perf map named,
    with the flag that has the runtime write one (perfmap.py);
  * a target the client could not be preloaded into (preload.py: static,
    setuid/setgid);
  * `--unwinder fp` on code built without frame pointers: stacks one or two
    frames deep.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from heapscope.model import unknown_code_pid
from heapscope.records import Record
from heapscope.symbolize.preload import preload_blocker
from heapscope.which import which

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    # Annotations only: profile.py imports this module (dpkg_owners), so a run-time import
    # back would make the two a cycle.
    from heapscope.symbolize.profile import MappingReport, SymbolizeReport

__all__ = ["ENTRY_FRAMES", "Unsymbolized", "debug_archive_advice", "fix_for", "is_mostly_shallow", "jit_fix",
           "jit_stats_rows", "mostly_shallow", "owning_package", "owning_packages", "preload_blocker",
           "unsymbolized_modules"]

DPKG_TIMEOUT_S = 3.0
# --unwinder fp: a process whose sampled stacks are mostly this shallow had no frame pointers to walk.
SHALLOW_DEPTH = 2
SHALLOW_SHARE = 0.5


class Unsymbolized(Record, frozen=True):
    """A module some of whose frames have no function name."""

    module: str  # the mapping's path
    frames: int  # frames left without a name
    build_id: str
    fix: str  # one phrase: what would symbolize them


def unsymbolized_modules(report: SymbolizeReport) -> list[Unsymbolized]:
    """The modules of `report` with frames left nameless, most frames first, each with its fix:
    one per file and build, its mappings' frames summed (each process maps a module on its own:
    the 38 shells of pyenv's shim were 38 lines of bash)."""
    todo: dict[tuple[str, str], tuple[MappingReport, int]] = {}  # (path, build id) -> (a mapping, frames)
    for m in report.mappings:
        if m.frames > m.named and (m.outcome != "not_a_file" or unknown_code_pid(m.name) is not None):
            first, frames = todo.get((m.name, m.build_id), (m, 0))
            todo[(m.name, m.build_id)] = (first, frames + m.frames - m.named)
    packages = {name: pkg for name, pkg in report.packages.items() if pkg}  # known from the symbol cache
    asked = list(dict.fromkeys(name for name, _ in todo if name not in report.packages and name.startswith("/")))
    found = dpkg_owners(asked) if asked else {}
    if found is not None:  # dpkg's answer, kept with the report: the profile keeps it for `report`
        packages.update(found)
        for name in asked:
            report.packages.setdefault(name, found.get(name, ""))
    out = [Unsymbolized(m.name, frames, m.build_id, fix_for(m, report, packages.get(m.name, "")))
           for m, frames in todo.values()]
    out.sort(key=lambda u: (-u.frames, u.module))
    return out


def fix_for(m: MappingReport, report: SymbolizeReport, package: str | None = None) -> str:
    """What would symbolize the frames of `m`; `package`: the Debian package of its file, None to look it up."""
    if unknown_code_pid(m.name) is not None:
        return jit_fix(m.detail)
    if m.outcome == "no_symbolizer":
        return "install llvm-symbolizer (Debian package `llvm`)"
    if m.outcome == "symbolizer_failed":
        return f"llvm-symbolizer failed on {m.file or m.name}"
    if m.outcome == "build_id_mismatch":
        return f"the file at {m.name} is another build now; give the recorded one: heapscope symbolize PROFILE" \
               " --binary-path DIR"
    pkg = owning_package(m.name) if package is None else package
    if pkg:
        return f"install its debug symbols: apt install {pkg}-dbgsym (Debian's debug archive; -dbg on older releases)"
    if report.debuginfod:
        why = report.debuginfod_missing.get(m.build_id) if m.build_id else "no build id to ask by"
        return (f"no debuginfod server had it ({why or 'not asked'}); build it with -g, or give its debug file:"
                " heapscope symbolize PROFILE --binary-path DIR")
    return ("build it with -g, or give its debug file: heapscope symbolize PROFILE --binary-path DIR"
            " (or set DEBUGINFOD_URLS to a debuginfod server)")


JIT_FIX = ("have the runtime write /tmp/perf-PID.map for its generated code: node --perf-basic-prof,"
           " python -X perf (CPython 3.12+), java -agentpath:libperfmap.so (perf-map-agent)")


def jit_fix(detail: str) -> str:
    """The fix for frames in code no loaded object holds (JIT), given what perf map was read (perfmap.describe)."""
    if detail.startswith("no ") or not detail:
        return f"code generated at run time (JIT): {JIT_FIX}"
    if any(why in detail for why in (": refused", ": not opened", ": not read")):
        return f"its perf map was not used ({detail})"
    return (f"not in its perf map ({detail}): code the runtime did not report (its own stubs, a"
            " trampoline) or a wrong return address")


def jit_stats_rows(report: SymbolizeReport) -> list[tuple[str, int | None, str, str, int, str]]:
    """Rows for `stats`: the frames of code in no loaded object (JIT) named from perf maps, and those
    left unnamed; none when the recording had no such frame."""
    jit = [m for m in report.mappings if unknown_code_pid(m.name) is not None]
    if not jit:
        return []
    named = sum(m.named for m in jit)
    unnamed = sum(m.frames - m.named for m in jit)
    return [
        ("jit_frames_named", None, "info", "producer", named,
         "frames of code in no loaded object (JIT) named from the program's /tmp/perf-PID.map"),
        ("jit_frames_unnamed", None, "data_loss", "producer", unnamed,
         f"frames of code in no loaded object (JIT) left unnamed ([unknown pid N]+0x...): {JIT_FIX}"),
    ]


#: Where a distribution's -dbgsym packages come from, and its debuginfod server (asked by build id
#: instead: nothing to install). Debian: wiki.debian.org/HowToGetABacktrace; Ubuntu: its Debug
#: Symbol Packages page. {codename} is VERSION_CODENAME of /etc/os-release.
DEBUG_ARCHIVES: dict[str, tuple[str, str, str]] = {
    # id: (sources line(s), keyring package or '', debuginfod server)
    "debian": ("deb http://deb.debian.org/debian-debug/ {codename}-debug main", "", "https://debuginfod.debian.net"),
    "ubuntu": ("deb http://ddebs.ubuntu.com {codename} main restricted universe multiverse\\n"
               "deb http://ddebs.ubuntu.com {codename}-updates main restricted universe multiverse",
               "ubuntu-dbgsym-keyring", "https://debuginfod.ubuntu.com"),
}
APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d")


def debug_archive_advice(fixes: Iterable[str], profile: str = "PROFILE", os_release: str | None = None,
                         apt_sources: Iterable[str] = APT_SOURCES) -> list[str]:
    """The lines that make an `apt install PKG-dbgsym` fix work on a stock system: the debug
    archive's sources line (Debian, Ubuntu, from /etc/os-release's VERSION_CODENAME) and the
    debuginfod server that needs no install; [] when no fix names -dbgsym, when apt already
    has the archive, or on another distribution (the fix's own words stand)."""
    if not any("-dbgsym" in f for f in fixes):
        return []
    fields = _os_release(os_release)
    distro = fields.get("ID", "")
    if distro not in DEBUG_ARCHIVES:
        distro = next((d for d in fields.get("ID_LIKE", "").split() if d in DEBUG_ARCHIVES), "")
    codename = fields.get("VERSION_CODENAME") or fields.get("UBUNTU_CODENAME", "")
    if not distro or not codename:
        return []
    sources, keyring, server = DEBUG_ARCHIVES[distro]
    host = "ddebs.ubuntu.com" if distro == "ubuntu" else "debian-debug"
    if _apt_has(host, apt_sources):
        return []
    sources = sources.format(codename=codename)
    name = "ddebs.list" if distro == "ubuntu" else "debian-debug.list"
    keys = f"sudo apt install {keyring} && " if keyring else ""
    return [
        f"the -dbgsym packages are in {distro.capitalize()}'s debug archive, which apt does not have yet: add it with",
        f"  {keys}printf '{sources}\\n' | sudo tee /etc/apt/sources.list.d/{name} && sudo apt update",
        f"  or, with nothing to install: DEBUGINFOD_URLS={server} heapscope symbolize {profile}",
    ]


def _os_release(text: str | None) -> dict[str, str]:
    if text is None:
        text = ""
        for path in ("/etc/os-release", "/usr/lib/os-release"):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read(64 * 1024)
                break
            except OSError:
                continue
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().isidentifier():
            out[key.strip()] = value.strip().strip("\"'")
    return out


def _apt_has(needle: str, paths: Iterable[str]) -> bool:
    """Whether an apt sources file among `paths` (files, or folders of .list/.sources files)
    names `needle`."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            try:
                files += [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith((".list", ".sources"))]
            except OSError:
                continue
        else:
            files.append(path)
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                if needle in f.read(1 << 20):
                    return True
        except OSError:
            continue
    return False


def owning_package(path: str) -> str:
    """The Debian package that installed `path`, '' when none (or no dpkg)."""
    return owning_packages([path]).get(path, "")


def owning_packages(paths: Iterable[str]) -> dict[str, str]:
    """path -> the Debian package that installed it, for those dpkg knows; one dpkg-query run for all."""
    return dpkg_owners(paths) or {}


def dpkg_owners(paths: Iterable[str]) -> dict[str, str] | None:
    """owning_packages(), or None when dpkg-query was there but could not answer (failed to
    start, timed out, said nothing sensible): an answer worth keeping only when not None."""
    names: dict[str, list[str]] = {}  # a name dpkg may know the file by -> the paths asked
    for path in paths:
        if not path.startswith("/") or "\0" in path:  # a NUL (a damaged profile's name): no file's name
            continue
        for p in (path, os.path.realpath(path)):
            # merged /usr: dpkg may know /lib/... when the loader says /usr/lib/..., or the other way
            for q in (p, p[4:] if p.startswith("/usr/") else "/usr" + p):
                known = names.setdefault(q, [])
                if path not in known:
                    known.append(path)
    if not names or which("dpkg-query") is None:
        return {}
    import subprocess  # here: most recordings name every module and ask dpkg nothing

    try:
        run = subprocess.run(["dpkg-query", "-S", *names], capture_output=True, text=True, timeout=DPKG_TIMEOUT_S,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError):
        return None
    if run.returncode not in (0, 1):  # 1: some path belongs to no package (an answer too)
        return None
    out: dict[str, str] = {}
    for line in run.stdout.splitlines():  # "pkg[:arch][, pkg2]: /path"
        pkgs, sep, file = line.partition(": ")
        pkg = pkgs.split(",")[0].split(":")[0].strip()
        if sep and pkg and " " not in pkg:
            for path in names.get(file.strip(), []):
                out.setdefault(path, pkg)
    return out


# The functions a whole walk ends in (glibc's; the first calls main, the others a thread's
# function): a stack whose outermost frame is one of them was walked to its bottom, however
# few frames it has (main calling malloc), and is no sign of missing frame pointers.
ENTRY_FRAMES = frozenset({"__libc_start_call_main", "__libc_start_main", "__libc_start_main_impl", "_start",
                          "start_thread", "clone", "clone3", "__clone", "__clone3"})


def mostly_shallow(depths: Iterable[int], roots: Iterable[str] | None = None) -> tuple[int, int]:
    """(stacks at most SHALLOW_DEPTH frames deep, all stacks) among `depths` (frames per sampled
    stack); `roots`: each stack's outermost function ('' when not symbolized), in step: a stack
    that ends in one of ENTRY_FRAMES is complete, not shallow."""
    n = shallow = 0
    for d, root in zip(depths, roots if roots is not None else _unnamed(), strict=False):
        n += 1
        shallow += d <= SHALLOW_DEPTH and root not in ENTRY_FRAMES
    return shallow, n


def _unnamed() -> Iterator[str]:
    while True:
        yield ""


def is_mostly_shallow(shallow: int, total: int) -> bool:
    return total > 0 and shallow / total > SHALLOW_SHARE
