"""store/labels.py: how a process is named in every view."""

from __future__ import annotations

from heapscope.model import ProcessInfo, Upid
from heapscope.store.labels import arguments, process_label, worked_on

CC1 = ("/usr/lib/gcc/x86_64-linux-gnu/12/cc1 -quiet -imultiarch x86_64-linux-gnu src/alpha.c -quiet"
       " -dumpdir alpha- -dumpbase alpha.c -dumpbase-ext .c -mtune=generic -march=x86-64 -o /tmp/ccX1.s")


def _info(name: str, exe: str, cmdline: str) -> ProcessInfo:
    return ProcessInfo(Upid(1), pid=7, ppid=1, name=name, cmdline=cmdline, exe=exe, uid=0, start_ts=0)


def test_a_compiler_names_its_source_an_assembler_and_a_linker_their_output() -> None:
    assert process_label(_info("cc1", "/usr/lib/gcc/x86_64-linux-gnu/12/cc1", CC1)) == "cc1 src/alpha.c"
    asm = _info("as", "/usr/bin/x86_64-linux-gnu-as", "as --64 -o alpha.o /tmp/ccX1.s")
    assert process_label(asm) == "as -o alpha.o"
    assert process_label(asm, exe=True) == "as (/usr/bin/x86_64-linux-gnu-as) -o alpha.o"
    ld = _info("collect2", "/usr/lib/gcc/x86_64-linux-gnu/12/collect2", "collect2 -oapp main.o")
    assert worked_on(ld) == "-o app"
    cxx = _info("g++-12", "/usr/bin/x86_64-linux-gnu-g++-12", "g++-12 -O2 -c 'my file.cpp'")
    assert worked_on(cxx) == "my file.cpp"


def test_other_processes_are_their_name_or_executable() -> None:
    redis = _info("redis-server", "/usr/bin/redis-check-rdb", "redis-server --save '' --port 7000")
    assert process_label(redis) == "redis-server"
    assert process_label(redis, exe=True) == "redis-server (/usr/bin/redis-check-rdb)"
    tiny = _info("tiny", "/opt/bin/tiny", "/opt/bin/tiny x.c")
    assert process_label(tiny, exe=True) == "/opt/bin/tiny"  # not a compiler: no file named
    assert process_label(_info("", "/usr/bin/env", "")) == "env"


def test_arguments_read_back_quoted_lines_and_old_blank_joined_ones() -> None:
    assert arguments("redis-server --save '' 'a b'") == ["redis-server", "--save", "", "a b"]
    assert arguments("sh -c echo it's") == ["sh", "-c", "echo", "it's"]  # written before quoting
