"""Test helpers for the exports: where the real readers are, a strict heaps_v2 checker,
and a small protobuf wire decoder for reading our own output in unit tests."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The project's shared/ folder sits beside the checkout (on CI too).
VALIDATORS = Path(os.environ.get("HEAPSCOPE_VALIDATORS",
                                 Path(__file__).resolve().parents[2] / "shared" / "validators"))
NODE_MODULES = Path(os.environ.get("HEAPSCOPE_NODE_MODULES", str(ROOT / "tests" / ".node" / "node_modules")))
CHROMIUM = "/usr/bin/chromium"


def validator(name: str) -> Path | None:
    p = VALIDATORS / name
    return p if p.exists() else None


def reader_missing(*needs: str) -> str | None:
    """Why a reader cannot run here (None when it can). Needs: go, node:<pkg>, chromium,
    py:<module>, validator:<file>, pprof-src."""
    for need in needs:
        kind, _, what = need.partition(":")
        if kind == "go" and not shutil.which("go"):
            return "go is not installed (apt-get install golang-go; .ci/run does)"
        if kind == "node":
            if not shutil.which("node"):
                return "node is not installed (apt-get install nodejs)"
            if not (NODE_MODULES / what / "package.json").exists():
                return f"npm package {what} not in {NODE_MODULES} (.ci/run installs it; or set HEAPSCOPE_NODE_MODULES)"
        if kind == "chromium" and not Path(CHROMIUM).exists():
            return "chromium is not installed (apt-get install chromium)"
        if kind == "py" and importlib.util.find_spec(what) is None:
            return f"python package {what} is not installed in this venv (.ci/run installs it)"
        if kind == "validator" and validator(what) is None:
            return f"validator script {what} not found in {VALIDATORS} (set HEAPSCOPE_VALIDATORS)"
        if kind == "pprof-src" and not Path("/usr/share/gocode/src/github.com/google/pprof").is_dir():
            return "pprof source not installed (apt-get install golang-github-google-pprof-dev)"
    return None


def node_env() -> dict[str, str]:
    env = dict(os.environ)
    env["NODE_PATH"] = str(NODE_MODULES)
    return env


# --- protobuf wire decoding -------------------------------------------------------------


def decode(buf: bytes) -> list[tuple[int, int | bytes]]:
    """The (field, value) pairs of one message: ints for varints, bytes for length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        shift = n = 0
        while True:
            b = buf[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n

    while i < len(buf):
        k = varint()
        field, wt = k >> 3, k & 7
        if wt == 0:
            out.append((field, varint()))
        elif wt == 2:
            n = varint()
            out.append((field, buf[i:i + n]))
            i += n
        else:
            raise ValueError(f"unexpected wire type {wt}")
    return out


def packed_ints(b: bytes) -> list[int]:
    """The values of a packed repeated varint field."""
    out: list[int] = []
    n = shift = 0
    for byte in b:
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            out.append(n)
            n = shift = 0
    return out


# --- heaps_v2 strict checker ----------------------------------------------------------------


def _is_hex(v: object) -> bool:
    if not isinstance(v, str) or not v:
        return False
    try:
        int(v, 16)
    except ValueError:
        return False
    return True


def check_chrome_trace(doc: object) -> list[str]:
    """Every rule of docs/exports.md (Chrome JSON) we know catapult's importer applies
    (or trips on). Returns the problems found; [] means the file passes."""
    errs: list[str] = []
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return ["no traceEvents array"]
    maps_seen: dict[object, dict[str, dict[int, dict[str, object]]]] = {}
    for n, ev in enumerate(events):
        where = f"event {n}"
        if not isinstance(ev, dict):
            errs.append(f"{where}: not an object")
            continue
        if ev.get("ph") != "v":
            continue
        for k in ("pid", "id", "ts"):
            if k not in ev:
                errs.append(f"{where}: memory dump without {k!r}")
        dumps = ev.get("args", {}).get("dumps")
        if not isinstance(dumps, dict):
            errs.append(f"{where}: no args.dumps")
            continue
        if dumps.get("level_of_detail") not in ("background", "light", "detailed"):
            errs.append(f"{where}: level_of_detail {dumps.get('level_of_detail')!r}")
        for region in dumps.get("process_mmaps", {}).get("vm_regions", []):
            for k in ("sa", "sz"):
                if not _is_hex(region.get(k)):
                    errs.append(f"{where}: vm_region {k}={region.get(k)!r} is not a hex string")
            if not isinstance(region.get("pf"), int):
                errs.append(f"{where}: vm_region pf is not an int")
        for name, ad in dumps.get("allocators", {}).items():
            if not ad.get("guid"):
                errs.append(f"{where}: allocator dump {name} has no guid")
            for an, attr in ad.get("attrs", {}).items():
                if attr.get("type") not in ("scalar", "string"):
                    errs.append(f"{where}: {name}.{an}: type {attr.get('type')!r}")
                if attr.get("type") == "scalar" and not _is_hex(attr.get("value")):
                    errs.append(f"{where}: {name}.{an}: value {attr.get('value')!r} is not a hex string")
        heaps = dumps.get("heaps_v2")
        if heaps is None:
            continue
        if "version" not in heaps:
            errs.append(f"{where}: heaps_v2 without version")
        maps = maps_seen.setdefault(ev.get("pid"), {"strings": {}, "nodes": {}, "types": {}})
        hm = heaps.get("maps", {})
        for mname in ("strings", "nodes", "types"):
            for rec in hm.get(mname, []):
                rid = rec.get("id")
                if not isinstance(rid, int):
                    errs.append(f"{where}: maps.{mname} record without int id")
                    continue
                if mname != "types" and rid < 1:
                    errs.append(f"{where}: maps.{mname} id {rid} < 1")
                if rid in maps[mname] and maps[mname][rid] != rec:
                    errs.append(f"{where}: maps.{mname} id {rid} redefined differently")
                maps[mname][rid] = rec
        for mname in ("nodes", "types"):
            for rec in hm.get(mname, []):
                if rec.get("name_sid") not in maps["strings"]:
                    errs.append(f"{where}: maps.{mname} {rec.get('id')}: name_sid {rec.get('name_sid')} unknown")
        for rec in hm.get("nodes", []):
            par = rec.get("parent")
            if par is not None and (par == 0 or par not in maps["nodes"]):
                errs.append(f"{where}: node {rec.get('id')}: parent {par} unknown (or 0)")
        for aname, cols in heaps.get("allocators", {}).items():
            for col in ("counts", "sizes", "types", "nodes"):
                if col not in cols:
                    errs.append(f"{where}: allocator {aname} has no {col} column")
            lens = {len(v) for v in cols.values() if isinstance(v, list)}
            if len(lens) > 1:
                errs.append(f"{where}: allocator {aname} columns of unequal length {sorted(lens)}")
            for t in cols.get("types", []):
                if t not in maps["types"]:
                    errs.append(f"{where}: allocator {aname}: type {t} not in maps.types")
            for nid in cols.get("nodes", []):
                if nid not in maps["nodes"]:
                    errs.append(f"{where}: allocator {aname}: node {nid} not in maps.nodes")
            for col in ("counts", "sizes"):
                for v in cols.get(col, []):
                    if not isinstance(v, int | float) or isinstance(v, bool):
                        errs.append(f"{where}: allocator {aname}: {col} value {v!r} is not a number")
    return errs


def chrome_stacks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per memory dump: {pid, id, summary_size, summary_count, entries: [(names root first, count, size)]}."""
    out = []
    strings: dict[object, dict[int, str]] = {}
    nodes: dict[object, dict[int, dict[str, Any]]] = {}
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "v":
            continue
        pid = ev["pid"]
        d = ev["args"]["dumps"]
        hm = d["heaps_v2"]["maps"]
        strings.setdefault(pid, {}).update({s["id"]: s["string"] for s in hm["strings"]})
        nodes.setdefault(pid, {}).update({x["id"]: x for x in hm["nodes"]})
        entries = []
        cols = d["heaps_v2"]["allocators"]["malloc"]
        for c, s, nid in zip(cols["counts"], cols["sizes"], cols["nodes"], strict=True):
            names = []
            node = nodes[pid].get(nid)
            while node is not None:
                names.append(strings[pid][node["name_sid"]])
                node = nodes[pid].get(node.get("parent", 0))
            entries.append((list(reversed(names)), c, s))
        attrs = d["allocators"]["malloc"]["attrs"]
        objs = d["allocators"]["malloc/allocated_objects"]["attrs"]
        out.append({"pid": pid, "id": ev["id"], "summary_size": int(attrs["size"]["value"], 16),
                    "summary_count": int(objs["shim_allocated_objects_count"]["value"], 16), "entries": entries})
    return out
