"""Parca's ProfileStoreService/WriteRaw messages, built from descriptors at import (no generated code).

Why not generated modules: generating at install time needs grpcio-tools (a
large build-time dependency) and committed *_pb2.py files are tied to the
protobuf version that wrote them. A FileDescriptorProto assembled here is
what protoc would emit for fleet/profilestore.proto, and protobuf's message
factory turns it into ordinary message classes; a unit test compiles the
.proto with protoc and compares the two descriptors field by field.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped]

PACKAGE = "parca.profilestore.v1alpha1"
SERVICE = f"{PACKAGE}.ProfileStoreService"
WRITE_RAW = f"/{SERVICE}/WriteRaw"

_F = descriptor_pb2.FieldDescriptorProto
# message -> [(field name, number, type, repeated, message type name)]
MESSAGES: dict[str, list[tuple[str, int, int, bool, str]]] = {
    "WriteRawRequest": [("tenant", 1, _F.TYPE_STRING, False, ""),
                        ("series", 2, _F.TYPE_MESSAGE, True, "RawProfileSeries"),
                        ("normalized", 3, _F.TYPE_BOOL, False, "")],
    "WriteRawResponse": [],
    "RawProfileSeries": [("labels", 1, _F.TYPE_MESSAGE, False, "LabelSet"),
                         ("samples", 2, _F.TYPE_MESSAGE, True, "RawSample")],
    "Label": [("name", 1, _F.TYPE_STRING, False, ""), ("value", 2, _F.TYPE_STRING, False, "")],
    "LabelSet": [("labels", 1, _F.TYPE_MESSAGE, True, "Label")],
    "RawSample": [("raw_profile", 1, _F.TYPE_BYTES, False, "")],
}


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="heapscope/parca_profilestore.proto", package=PACKAGE, syntax="proto3")
    for name, fields in MESSAGES.items():
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, repeated, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype,
                            label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            f.json_name = "".join(w.capitalize() if i else w for i, w in enumerate(fname.split("_")))
            if type_name:
                f.type_name = f".{PACKAGE}.{type_name}"
    svc = fdp.service.add(name="ProfileStoreService")
    svc.method.add(name="WriteRaw", input_type=f".{PACKAGE}.WriteRawRequest",
                   output_type=f".{PACKAGE}.WriteRawResponse")
    return fdp


_pool = descriptor_pool.DescriptorPool()
_pool.Add(file_descriptor())


def _cls(name: str) -> Any:
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))


WriteRawRequest = _cls("WriteRawRequest")
WriteRawResponse = _cls("WriteRawResponse")


def write_raw_request(pprof_gz: bytes, labels: dict[str, str]) -> Any:
    """A WriteRawRequest with one series (`labels`) holding one profile."""
    req = WriteRawRequest()
    series = req.series.add()
    for k, v in sorted(labels.items()):
        series.labels.labels.add(name=k, value=v)
    series.samples.add(raw_profile=pprof_gz)
    return req
