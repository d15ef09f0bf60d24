"""The OTLP exporter's guard on the installed opentelemetry-proto schema."""

from __future__ import annotations

import pytest

from heapscope.errors import UsageError

pytest.importorskip("opentelemetry.proto.profiles.v1development.profiles_pb2",
                    reason="needs opentelemetry-proto: pip install '.[otlp]'")

from heapscope.export import otlp  # noqa: E402


def test_installed_package_is_the_schema_we_write():
    pb, common, _resource, service = otlp.messages()
    # v1.10.0: Sample {stack_index 1, attribute_indices 2, link_index 3, values 4, timestamps_unix_nano 5}
    assert [(f.name, f.number) for f in pb.Sample.DESCRIPTOR.fields] == [
        ("stack_index", 1), ("attribute_indices", 2), ("link_index", 3), ("values", 4), ("timestamps_unix_nano", 5)]
    assert pb.Profile.DESCRIPTOR.fields_by_name["sample_type"].message_type.name == "ValueType"
    assert "ProfilesService" in service.DESCRIPTOR.services_by_name


def test_another_schema_is_refused(monkeypatch):
    # GIVEN a package whose Sample.values is where v1.9 had it (field 2)
    from opentelemetry.proto.profiles.v1development import profiles_pb2

    class Field:
        number = 2

    class Descriptor:
        fields_by_name = {"values": Field()}

    class Sample:
        DESCRIPTOR = Descriptor()

    monkeypatch.setattr(profiles_pb2, "Sample", Sample)
    # THEN the export says which schema it writes and what to install, instead of writing bytes a
    # v1.10 collector would misread
    with pytest.raises(UsageError, match=r"not of OTLP proto v1\.10\.0.*pip install 'heapscope\[otlp\]'"):
        otlp.messages()
