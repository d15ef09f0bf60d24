"""The OTLP exporter's guard on the installed opentelemetry-proto schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from heapscope.errors import UsageError

pytest.importorskip("opentelemetry.proto.profiles.v1development.profiles_pb2",
                    reason="needs opentelemetry-proto: pip install '.[otlp]'")

from heapscope.export import otlp  # noqa: E402


def test_installed_package_is_the_schema_we_write() -> None:
    pb, common, _resource, service = otlp.messages()
    # v1.10.0: Sample {stack_index 1, attribute_indices 2, link_index 3, values 4, timestamps_unix_nano 5}
    assert [(f.name, f.number) for f in pb.Sample.DESCRIPTOR.fields] == [
        ("stack_index", 1), ("attribute_indices", 2), ("link_index", 3), ("values", 4), ("timestamps_unix_nano", 5)]
    assert pb.Profile.DESCRIPTOR.fields_by_name["sample_type"].message_type.name == "ValueType"
    assert "ProfilesService" in service.DESCRIPTOR.services_by_name


def test_another_schema_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_names_that_are_not_utf8_and_huge_figures(tmp_path: Path) -> None:
    # GIVEN a profile whose mapping and frame names hold bytes that are not UTF-8 and whose
    # addresses sit at the top of the u64 range
    import io
    import sqlite3

    from heapscope.model import Frame, Mapping, MappingId, ProcessInfo, Upid
    from heapscope.store.reader import open_profile
    from heapscope.store.writer import ProfileWriter

    top = (1 << 64) - 0x10000
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    w.set_metadata("interval", 1)
    w.add_process(ProcessInfo(upid=Upid(1), pid=7, ppid=1, name="demo", cmdline="demo -x",
                              exe="/bin/demo", uid=0, start_ts=1000))
    w.add_mappings([(1, Mapping("ab" * 20, 0x1000, 0, top, top + 0x2000, 0, "/bin/demo"))])
    w.add_frames([(1, Frame(MappingId(1), 0xFFF0, "main"))])
    w.add_callsites([(1, 0, None, 1)])
    w.add_dump(1, 1000, 2000, "end", [(1, 2, 64)], "libc.malloc")
    w.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE stack_profile_frame SET name = ?", (b"ma\xffin",))
    db.execute("UPDATE stack_profile_mapping SET name = ?", (b"/bin/d\xffemo",))
    db.commit()
    db.close()
    # WHEN it is exported THEN the names carry U+FFFD and the address wraps, as a CPU's would
    buf = io.BytesIO()
    with open_profile(path) as p:
        otlp.export(p, buf, dump="end")
    pb = otlp.messages()[0]
    data = pb.ProfilesData.FromString(buf.getvalue())
    d = data.dictionary
    assert "ma\ufffdin" in d.string_table and "/bin/d\ufffdemo" in d.string_table
    assert d.location_table[1].address == (top - 0x1000 + 0xFFF0) & ((1 << 64) - 1)
    totals = {d.string_table[q.sample_type.type_strindex]: sum(s.values[0] for s in q.samples)
              for q in data.resource_profiles[0].scope_profiles[0].profiles}
    assert totals == {"inuse_space": 64, "inuse_objects": 2, "alloc_space": 64, "alloc_objects": 2}
