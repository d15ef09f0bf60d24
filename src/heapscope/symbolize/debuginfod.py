"""Debug files by build id from debuginfod servers (DEBUGINFOD_URLS).

The protocol (https://sourceware.org/elfutils/Debuginfod.html): HTTP GET
`URL/buildid/<hex build id>/debuginfo` (the DWARF) or `.../executable`; 404
when the server has none. DEBUGINFOD_URLS holds one or more URLs separated by
spaces; they are tried in order.

Files land in a private cache, `$XDG_CACHE_HOME/heapscope/debuginfod` (else
~/.cache/...), or `HEAPSCOPE_DEBUGINFOD_CACHE`: a directory of mode 0700 owned
by the user; one that is a symbolic link, another user's, or open to others is
refused (one line), never followed. A file is downloaded to a temporary name
in the cache, checked (an ELF file whose build id is the one asked for), and
renamed into place; a cached file is opened without following links. Every
request has a timeout; a server that cannot be reached is not asked again in
the same run. Each failure is one line in `errors`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Literal

from heapscope.symbolize.elfinfo import NotElfError, read_elf_info

TIMEOUT_S = 10.0
MAX_BYTES = 4 << 30  # no debug file is larger; a server that sends more is refused
_CHUNK = 1 << 20
_HEX = re.compile(r"^[0-9a-f]{2,128}$")

Kind = Literal["debuginfo", "executable"]


def urls_from_env(env: dict[str, str] | None = None) -> list[str]:
    """The servers of DEBUGINFOD_URLS (space separated), http(s) only."""
    value = (os.environ if env is None else env).get("DEBUGINFOD_URLS", "")
    return [u.rstrip("/") for u in value.split() if urllib.parse.urlsplit(u).scheme in ("http", "https")]


def default_cache_dir(env: dict[str, str] | None = None) -> Path:
    e = os.environ if env is None else env
    if e.get("HEAPSCOPE_DEBUGINFOD_CACHE"):
        return Path(e["HEAPSCOPE_DEBUGINFOD_CACHE"])
    base = e.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "heapscope" / "debuginfod"


class Debuginfod:
    """A client of some debuginfod servers with a private on-disk cache. One per run."""

    def __init__(self, urls: list[str], cache_dir: Path | None = None, timeout: float = TIMEOUT_S) -> None:
        self.urls = list(urls)
        self.cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self.timeout = timeout
        self.errors: list[str] = []  # one line per failure, for the user
        self.missing: dict[str, str] = {}  # build id -> why no server gave its debug info
        self._dead: set[str] = set()  # servers that could not be reached
        self._cache_ok: bool | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Debuginfod | None:
        urls = urls_from_env(env)
        return cls(urls, default_cache_dir(env)) if urls else None

    def fetch(self, build_id: str, kind: Kind = "debuginfo") -> str | None:
        """The path of the cached file for `build_id`, downloading it when needed; None when no server has it."""
        build_id = build_id.lower()
        if not _HEX.match(build_id) or not self._cache_ready():
            return None
        target = self.cache_dir / f"{build_id}.{kind}"
        if self._cached(target, build_id):
            return str(target)
        reasons: list[str] = []
        for url in self.urls:
            if url in self._dead:
                continue
            why = self._download(f"{url}/buildid/{build_id}/{kind}", target, build_id)
            if why is None:
                return str(target)
            reasons.append(f"{url}: {why}")
        self.missing.setdefault(build_id, "; ".join(reasons) or "no server reachable")
        return None

    # -- the cache ---------------------------------------------------------------------------

    def _cache_ready(self) -> bool:
        if self._cache_ok is None:
            self._cache_ok = self._make_cache()
        return self._cache_ok

    def _make_cache(self) -> bool:
        d = self.cache_dir
        with contextlib.suppress(FileExistsError, OSError):
            d.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            self.errors.append(f"debuginfod cache {d}: cannot create: {e.strerror or e}")
            return False
        try:
            st = os.lstat(d)
        except OSError as e:
            self.errors.append(f"debuginfod cache {d}: {e.strerror or e}")
            return False
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            self.errors.append(f"debuginfod cache {d}: not a directory (a symbolic link?): refused")
            return False
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            self.errors.append(f"debuginfod cache {d}: must be yours and private (mode 0700): refused")
            return False
        return True

    def _cached(self, target: Path, build_id: str) -> bool:
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == errno.ELOOP:
                self.errors.append(f"debuginfod cache: {target} is a symbolic link: refused")
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            return _matches(f"/proc/self/fd/{fd}", build_id)
        finally:
            os.close(fd)

    # -- HTTP --------------------------------------------------------------------------------

    def _download(self, url: str, target: Path, build_id: str) -> str | None:
        """None on success, else why (one phrase)."""
        server = url.split("/buildid/", 1)[0]
        try:
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".part.")
        except OSError as e:
            return f"cannot write to the cache: {e.strerror or e}"
        try:
            try:
                with urllib.request.urlopen(url, timeout=self.timeout) as resp, os.fdopen(fd, "wb") as out:
                    fd = -1
                    size = 0
                    while chunk := resp.read(_CHUNK):
                        size += len(chunk)
                        if size > MAX_BYTES:
                            return f"larger than {MAX_BYTES >> 30} GiB: refused"
                        out.write(chunk)
            except urllib.error.HTTPError as e:
                return "not found" if e.code == 404 else f"HTTP {e.code}"
            except (urllib.error.URLError, OSError, ValueError) as e:
                reason = getattr(e, "reason", e)
                self._dead.add(server)
                self.errors.append(f"debuginfod server {server} unreachable: {reason}")
                return f"unreachable ({reason})"
            if not _matches(tmp, build_id):
                return "sent a file that is not the ELF file of this build id: refused"
            os.replace(tmp, target)
            tmp = ""
            return None
        finally:
            if fd >= 0:
                os.close(fd)
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def _matches(path: str, build_id: str) -> bool:
    try:
        return read_elf_info(path).build_id == build_id
    except (OSError, NotElfError):
        return False
