"""The otel_memory USDT probes in the built client (client/probes.h): their SDT notes as
`readelf -n` reads them. A real consumer firing them is tests/integration/test_usdt.py."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import heapscope

LIB = Path(heapscope.__file__).parent / "client" / "libheapscope.so"
INSTALL = "apt-get install systemtap-sdt-dev, then rebuild heapscope"

# The ABI's first three argument registers, where the design doc's first consumer reads them.
ARG_REGS = {"x86_64": ("%rdi", "%rsi", "%rdx"), "aarch64": ("x0", "x1", "x2")}

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None,
                                reason="readelf is not installed (apt-get install binutils)")


def _sdt_header_found() -> bool:
    """Whether the C compiler finds <sys/sdt.h>, as meson asks it at build time."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return False
    run = subprocess.run([cc, "-E", "-x", "c", "-", "-o", "/dev/null"], input="#include <sys/sdt.h>\n",
                         capture_output=True, text=True, timeout=60)
    return run.returncode == 0


def _notes() -> list[dict[str, str]]:
    """The stapsdt notes of the client: one dict of readelf's fields per probe."""
    out = subprocess.run(["readelf", "-n", str(LIB)], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    notes: list[dict[str, str]] = []
    for block in out.split("NT_STAPSDT")[1:]:
        fields = dict(re.findall(r"^\s*(Provider|Name|Arguments): ?(.*)$", block, re.M))
        sem = re.search(r"Semaphore: (0x[0-9a-f]+)", block)
        fields["Semaphore"] = sem.group(1) if sem else ""
        notes.append(fields)
    return notes


def _section(name: str) -> tuple[int, int] | None:
    """(address, size) of a section of the client, None when it has none."""
    out = subprocess.run(["readelf", "-S", "-W", str(LIB)], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    m = re.search(rf"\s{re.escape(name)}\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", out)
    return (int(m.group(1), 16), int(m.group(2), 16)) if m else None


def test_client_has_both_probes_with_semaphores() -> None:
    notes = [n for n in _notes() if n.get("Provider") == "otel_memory"]
    if not notes:
        # A build without the header leaves the probes out (meson warns); with it, never.
        assert not _sdt_header_found(), f"<sys/sdt.h> is there but {LIB} has no otel_memory probes"
        pytest.skip(f"built without the otel_memory probes: <sys/sdt.h> is missing ({INSTALL})")
    by_name = {n["Name"]: n for n in notes}
    assert sorted(by_name) == ["alloc", "free"] and len(notes) == 2
    # Each semaphore is a 16-bit counter of its own in .probes.
    probes = _section(".probes")
    assert probes is not None, "no .probes section"
    lo, size = probes
    sems = {name: int(n["Semaphore"], 16) for name, n in by_name.items()}
    assert sems["alloc"] != sems["free"]
    for addr in sems.values():
        assert lo <= addr and addr + 2 <= lo + size
    # alloc(ptr, size, weight) and free(ptr): 8-byte unsigned arguments, in the argument
    # registers of the calling convention where it is known.
    args = {name: n["Arguments"].split() for name, n in by_name.items()}
    assert len(args["alloc"]) == 3 and len(args["free"]) == 1
    assert all(a.startswith("8@") for a in args["alloc"] + args["free"])
    regs = ARG_REGS.get(platform.machine())
    if regs:
        assert [a[2:] for a in args["alloc"]] == list(regs)
        assert [a[2:] for a in args["free"]] == [regs[0]]
