"""The descriptors heapscope builds for Parca's WriteRaw equal protoc's reading of profilestore.proto."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from heapscope.fleet import _parca


def repeated(f: Any) -> bool:
    # protobuf 7 dropped FieldDescriptor.label for is_repeated; older ones have only label (3 = repeated)
    return bool(f.is_repeated) if hasattr(f, "is_repeated") else f.label == 3


def fields(descriptor: Any) -> dict[str, list[tuple[str, int, int, bool, str]]]:
    return {m.name: sorted((f.name, f.number, f.type, repeated(f), f.message_type.full_name if f.message_type else "")
                           for f in m.fields)
            for m in descriptor.message_types_by_name.values()}


def test_descriptors_match_protoc(pb2: ModuleType) -> None:
    ours = _parca.WriteRawRequest.DESCRIPTOR.file
    theirs = pb2.DESCRIPTOR
    assert ours.package == theirs.package == "parca.profilestore.v1alpha1"
    assert fields(ours) == fields(theirs)
    method = theirs.services_by_name["ProfileStoreService"].methods_by_name["WriteRaw"]
    assert _parca.WRITE_RAW == f"/{method.containing_service.full_name}/{method.name}"


def test_bytes_decode_with_generated_classes(pb2: ModuleType) -> None:
    req = _parca.write_raw_request(b"\x1f\x8bprofile", {"__name__": "memory", "host": "h1"})
    back = pb2.WriteRawRequest.FromString(req.SerializeToString())
    (series,) = back.series
    assert {lb.name: lb.value for lb in series.labels.labels} == {"__name__": "memory", "host": "h1"}
    assert [s.raw_profile for s in series.samples] == [b"\x1f\x8bprofile"]
    # Field numbers on the wire, byte by byte: series = 2, labels = 1, samples = 2, raw_profile = 1.
    raw = req.SerializeToString()
    assert raw[0] == (2 << 3 | 2)
