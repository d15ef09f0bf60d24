"""Fixtures for the C ingest loop: the extension itself, and shared rings to feed it.

An installed heapscope is used as it is. When heapscope runs from src/ (a
fresh clone), the extension is compiled with `cc` into a session temporary
directory and loaded under its real name, so the tests run against the C
sources of this tree and never against a stale hand-built .so left in src/.
"""

from __future__ import annotations

import importlib
import importlib.util
import mmap
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.machinery import ExtensionFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from heapscope.wire import codec

MODULE_NAME = "heapscope.producer._ingest"
SRC = Path(__file__).resolve().parents[3] / "src" / "heapscope"


def _compile(out_dir: Path) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"heapscope is not installed and there is no C compiler ({cc}) to build _ingest")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = out_dir / f"_ingest{suffix}"
    sources = sorted(str(p) for p in (SRC / "producer").glob("*.c"))
    cmd = [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
           f"-I{sysconfig.get_paths()['include']}", f"-I{SRC / 'wire'}", *sources, "-o", str(out)]
    subprocess.run(cmd, check=True, timeout=120)
    return out


@pytest.fixture(scope="session")
def ingest_mod(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    try:
        module = importlib.import_module(MODULE_NAME)
        if not Path(module.__file__ or "").resolve().is_relative_to(SRC):
            return module
    except ImportError:
        pass
    path = _compile(tmp_path_factory.mktemp("ingest_build"))
    loader = ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE_NAME] = module
    return module


@dataclass
class Ring:
    """A shared ring as the producer creates it, the client's writer, and an Ingest on it."""

    fd: int
    size: int
    shm: mmap.mmap
    writer: codec.RingWriter
    ingest: Any
    returned: list[bytes] = field(default_factory=list)
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.ingest.close()
            self.shm.close()
            os.close(self.fd)

    def meta(self, name: str) -> int:
        return codec.read_meta(self.shm, name)

    def data(self) -> bytes:
        return bytes(self.shm[codec.META_SIZE:codec.META_SIZE + self.size])

    def feed(self, records: list[bytes]) -> None:
        """Write every record, draining whenever the ring is full, then drain."""
        for rec in records:
            while not self.writer.write(rec):
                self.returned += self.ingest.drain()
        self.returned += self.ingest.drain()

    def put_raw(self, offset: int, raw: bytes) -> None:
        """Write bytes into the data area, bypassing the writer."""
        base = codec.META_SIZE + offset
        self.shm[base:base + len(raw)] = raw

    def stats(self) -> dict[str, int]:
        return self.ingest.stats()

    def totals(self) -> dict[int, tuple[int, int, int, int]]:
        out = {}
        for stack_id, ab, fb, ac, fc in struct.iter_unpack("<5Q", self.ingest.totals()):
            out[stack_id] = (ab, fb, ac, fc)
        return out

    def live(self) -> dict[int, tuple[int, int, int, int]]:
        """addr -> (sample_size, alloc_size, stack_id, seq)"""
        return {row[0]: row[1:] for row in struct.iter_unpack("<5Q", self.ingest.live())}

    def stream(self) -> list[tuple[int, ...]]:
        return list(struct.iter_unpack("<7Q", self.ingest.take_stream()))


def make_shm(size: int) -> tuple[int, mmap.mmap]:
    fd = os.memfd_create("heapscope-test-ring")
    os.ftruncate(fd, codec.META_SIZE + size)
    shm = mmap.mmap(fd, codec.META_SIZE + size)
    for name, value in (("magic", codec.WIRE_MAGIC), ("version", codec.WIRE_VERSION), ("ring_size", size)):
        off, fmt = codec.META_FIELDS[name]
        struct.pack_into(fmt, shm, off, value)
    return fd, shm


@pytest.fixture
def shm_factory() -> Iterator[Any]:
    """make(size) -> (fd, shm): a fresh memfd holding an initialised meta page."""
    made: list[tuple[int, mmap.mmap]] = []

    def make(size: int) -> tuple[int, mmap.mmap]:
        made.append(make_shm(size))
        return made[-1]

    yield make
    for fd, shm in made:
        shm.close()
        os.close(fd)


@pytest.fixture
def make_ring(ingest_mod: ModuleType) -> Iterator[Any]:
    rings: list[Ring] = []

    def make(size: int = 1 << 16, stream: bool = False) -> Ring:
        fd, shm = make_shm(size)
        ring = Ring(fd, size, shm, codec.RingWriter(shm), ingest_mod.Ingest(fd, size, stream=stream))
        rings.append(ring)
        return ring

    yield make
    for ring in rings:
        ring.close()
