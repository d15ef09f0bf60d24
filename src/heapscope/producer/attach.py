"""Attach to a running process (`heapscope record -p PID`) and let it go again.

    check the pid: exists, ours, not init or heapscope itself, dynamically
      linked against glibc, no other allocator (jemalloc, tcmalloc, ...)
      -> lock it: flock on its /proc/PID/mem, so two sessions never attach to
         one process (only who may ptrace it can open that file: no other user
         can hold the lock in its place, no file in a shared directory)
      -> gdb -p PID stops every thread and picks one that is not inside the
         allocator or the dynamic loader (one that holds the malloc lock would
         deadlock on itself in dlopen); when every thread is inside, gdb lets
         go and tries again a little later
      -> on that thread: dlopen(libheapscope.so), heapscope_attach(socket,
         token) (in the background: the client's handshake needs the producer
         loop running meanwhile)
      -> the client patches the GOT of every loaded object; from here the
         process is profiled like a preloaded one, with from_startup = false
    detach: the producer sets shutting_down and closes the socket; the hooks
    stay in place and pass straight through until a later attach, which finds
    the client loaded (dlopen returns it again) and starts a new session in it
    (client/session.c, start_again).

Every failure becomes one AttachError line that says what to do.
"""

from __future__ import annotations

import binascii
import contextlib
import fcntl
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from heapscope.errors import AttachError
from heapscope.records import Record

GDB_TIMEOUT_S = 60.0  # one whole attach, all tries together
GDB_INTERRUPT_S = 10.0  # for gdb to unwind an interrupted call and detach
RETRY_PAUSE_S = 0.02  # between two tries when every thread was inside the allocator
# heapscope_attach() results (enum hs_attach_result in client/session.h).
ATTACH_OK, ATTACH_BUSY, ATTACH_NO_SESSION, ATTACH_NO_HOOKS, ATTACH_DRAINING = 0, 1, 2, 3, 4
# Allocators the client cannot sit in front of: their malloc is not glibc's,
# and pointers from before the attach are theirs (a crash in
# malloc_usable_size on redis-server, linked with libjemalloc).
FOREIGN_ALLOCATORS = re.compile(
    r"^lib(jemalloc|tcmalloc(_minimal)?|mimalloc|hoard|snmalloc|rpmalloc|scudo|umem|tbbmalloc)[.-]")
_LIBC = re.compile(r"^libc\.so\.6$|^libc-2\.\d+\.so$")

# Run inside gdb's Python: pick a thread outside the allocator and the loader,
# call dlopen and heapscope_attach there. Prints heapscope-unsafe when there
# is none, else heapscope-handle N and heapscope-result N.
#
# gdb's own calls save and restore every register, the vector ones too. gdb 13
# cannot write those on CPUs with AMX (the kernel refuses the size of its XSAVE
# buffer: "Couldn't write extended state status"), so the script first tries a
# write it undoes at once; when that fails it makes each call itself, writing only
# the general registers, on a thread stopped in a system call: there the vector
# registers are the caller's to lose (the System V ABI), so the call may change
# them. Its string arguments go on the thread's stack, not through malloc.
_GDB_SCRIPT = r"""
import gdb, re
unsafe = re.compile(r"malloc|calloc|realloc|free|memalign|valloc|arena|tcache|_int_|_dl_|dl_open|dlopen|"
                    r"dlclose|dlsym|dlerror|dl_iterate|fork|heapscope|hs_|lll_lock|exit|_IO_cleanup|_IO_flush_all")
inferior = gdb.selected_inferior()
def vectors_writable():
    try:
        gdb.execute("set $xmm15.v2_int64[0] = $xmm15.v2_int64[0] ^ 1")
    except gdb.error as e:
        return "extended state" not in str(e)
    gdb.execute("set $xmm15.v2_int64[0] = $xmm15.v2_int64[0] ^ 1")
    return True
by_gdb = not GENERAL_CALLS and vectors_writable()
def in_syscall(frame):
    try:
        return bytes(inferior.read_memory(frame.pc() - 2, 2)) == b"\x0f\x05"
    except gdb.error:
        return False
def is_safe(thread):
    thread.switch()
    frame = gdb.newest_frame()
    if not by_gdb and not in_syscall(frame):
        return False
    depth = 0
    while frame is not None and depth < 256:
        if unsafe.search(frame.name() or ""):
            return False
        try:
            frame = frame.older()
        except gdb.error:
            return False
        depth += 1
    return frame is None
GENERAL = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
           "r14", "r15", "eflags")
def entry_point():
    got = re.search(r"AT_ENTRY\b.*?(0x[0-9a-fA-F]+)", gdb.execute("info auxv", to_string=True))
    return int(got.group(1), 16)
def call_general(thread, fn, args):
    frame = gdb.newest_frame()
    frame.select()  # registers are written in the innermost frame only
    saved = [(r, int(frame.read_register(r))) for r in GENERAL]
    pc, orig_rax = int(frame.pc()), int(frame.read_register("orig_rax"))
    ret = entry_point()  # never run again, as gdb's own calls return there too
    sp = dict(saved)["rsp"] - 4096  # past the red zone and whatever the thread left below it
    values = []
    for a in args:
        if isinstance(a, str):
            sp -= len(a) + 1
            inferior.write_memory(sp, a.encode() + b"\0")
            a = sp
        values.append(a)
    sp = (sp & ~15) - 8  # as after a call instruction: the return address pushed
    inferior.write_memory(sp, ret.to_bytes(8, "little"))
    stop = gdb.Breakpoint("*%d" % ret, internal=True)
    try:
        for reg, v in zip(("rdi", "rsi", "rdx"), values):
            gdb.execute("set $%s = %d" % (reg, v))
        gdb.execute("set $rsp = %d" % sp)
        gdb.execute("set $rip = %d" % fn)
        gdb.execute("set $orig_rax = -1")  # no restart of the interrupted system call into fn
        for _ in range(1000):  # a signal stopping another thread: go on
            gdb.execute("continue", to_string=True)
            if gdb.selected_thread() == thread:
                if int(gdb.newest_frame().pc()) == ret:
                    return int(gdb.newest_frame().read_register("rax"))
                # stopped inside the call (a signal): undone, as gdb's unwindonsignal would
                raise gdb.error("the call stopped in the target before it returned")
        raise gdb.error("the call did not return")
    finally:
        thread.switch()
        gdb.newest_frame().select()
        stop.delete()
        for reg, v in saved:
            gdb.execute("set $%s = %d" % (reg, v))
        gdb.execute("set $rip = %d" % pc)
        gdb.execute("set $orig_rax = %d" % orig_rax)
def call(thread, fn, signature, args):
    if not by_gdb:
        address = fn if isinstance(fn, int) else int(gdb.parse_and_eval("(long) &%s" % fn))
        return call_general(thread, address, args)
    quoted = ", ".join('"%s"' % a if isinstance(a, str) else "(%s) %d" % (t, a)
                       for a, t in zip(args, signature[1]))
    return int(gdb.parse_and_eval("((%s (*)(%s)) %s)(%s)" % (signature[0], ", ".join(signature[1]), fn, quoted)))
pick = None
for t in sorted(inferior.threads(), key=lambda t: t.num):
    try:
        if t.is_valid() and is_safe(t):
            pick = t
            break
    except gdb.error:
        pass
if pick is None:
    print("heapscope-unsafe %d" % (0 if by_gdb else 1))
else:
    pick.switch()
    # RTLD_NOW | RTLD_GLOBAL (2 | 0x100): global, so that the custom heap functions are found by
    # the program's dlsym(RTLD_DEFAULT) (include/heapscope.h); objects loaded earlier (libc) come
    # first in the global scope, so no malloc resolves to the client's.
    h = call(pick, "dlopen", ("void *", ("const char *", "int")), (LIB, 258)) & 0xFFFFFFFFFFFFFFFF
    print("heapscope-handle %d" % h)
    if h:
        f = call(pick, "dlsym", ("void *", ("void *", "const char *")), (h, "heapscope_attach")) & 0xFFFFFFFFFFFFFFFF
        print("heapscope-symbol %d" % f)
        if f:
            r = call(pick, f, ("int", ("const char *", "const char *")), (SOCK, TOKEN))
            print("heapscope-result %d" % ((r & 0xFFFFFFFF) - (1 << 32) if r & 0x80000000 else r & 0xFFFFFFFF))
"""
_MARK = re.compile(r"^heapscope-(unsafe|handle|symbol|result)(?: (-?\d+))?$", re.MULTILINE)


class AlreadyProfiled(AttachError):
    """Another heapscope session profiles this pid (rejected_concurrent)."""


def check_target(pid: int) -> None:
    """Fail with a clear message when `pid` cannot (or must not) be attached to."""
    if pid == 1:
        raise AttachError("pid 1 is init: heapscope does not attach to it (stopping it in gdb would "
                          "stop the whole system)")
    if pid == os.getpid():
        raise AttachError(f"pid {pid} is this heapscope process itself")
    try:
        st = os.stat(f"/proc/{pid}")
    except FileNotFoundError:
        raise AttachError(f"no process with pid {pid}") from None
    me = os.geteuid()
    if me != 0 and st.st_uid != me:
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        raise AttachError(f"pid {pid} belongs to user {owner}: attach only to your own processes "
                          "(or run heapscope as root)")
    try:
        os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        raise AttachError(f"pid {pid} is a kernel thread or a zombie: nothing to attach to") from None
    except PermissionError:
        raise AttachError(_ptrace_hint(pid)) from None
    state, tracer = _state(pid)
    if state in ("T", "t"):
        raise AttachError(f"pid {pid} is stopped: continue it first (kill -CONT {pid}); gdb could not run "
                          "anything in it")
    if tracer:
        raise AttachError(f"pid {pid} is already traced by pid {tracer} (a debugger or strace): detach that first")
    check_linkage(pid)


def _state(pid: int) -> tuple[str, int]:
    """(state letter, tracer pid or 0) from /proc/PID/status."""
    state, tracer = "", 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                state = line.split()[1]
            elif line.startswith("TracerPid:"):
                tracer = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return state, tracer


def check_linkage(pid: int) -> None:
    """Refuse what an injected dlopen would crash: static programs, no glibc, another allocator."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except FileNotFoundError:
        raise AttachError(f"no process with pid {pid} (it exited)") from None
    except PermissionError:
        raise AttachError(_ptrace_hint(pid)) from None
    names = {os.path.basename(line.split(None, 5)[5]) for line in maps.splitlines() if len(line.split(None, 5)) == 6}
    if not _dynamic(pid):
        raise AttachError(f"pid {pid} runs a statically linked program: there is no loader to bring the "
                          "client in (attaching would kill it); it cannot be profiled")
    if not any(_LIBC.match(n) for n in names):
        raise AttachError(f"pid {pid} is not linked with glibc: heapscope can only attach to glibc programs")
    foreign = sorted(n for n in names if FOREIGN_ALLOCATORS.match(n))
    if foreign:
        raise AttachError(f"pid {pid} allocates with {foreign[0]}, not glibc's malloc: heapscope cannot attach "
                          "to it (profile it from its start with `heapscope record -- CMD` instead)")
    if _defines_malloc(pid):
        raise AttachError(f"pid {pid} has its own malloc (its executable defines one): heapscope cannot attach "
                          "to it")


def _dynamic(pid: int) -> bool:
    """Does the program have an ELF interpreter (PT_INTERP), i.e. a dynamic loader?"""
    from heapscope.elf import PT_INTERP, ElfError, ElfFile

    try:
        with open(f"/proc/{pid}/exe", "rb") as f:
            return PT_INTERP in ElfFile(f).segment_types()
    except FileNotFoundError:
        raise AttachError(f"no process with pid {pid} (it exited)") from None
    except PermissionError:
        raise AttachError(_ptrace_hint(pid)) from None
    except (OSError, ElfError) as e:
        raise AttachError(f"cannot read the executable of pid {pid}: {e}") from None


def _defines_malloc(pid: int) -> bool:
    from heapscope.elf import ElfError, ElfFile

    try:
        with open(f"/proc/{pid}/exe", "rb") as f:
            elf = ElfFile(f)
            return elf.defines_function("malloc") or elf.defines_function("free")
    except (OSError, ElfError):
        return False


def find_gdb() -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        raise AttachError("attaching (-p) needs gdb: install it with `apt-get install gdb` "
                          "(Debian package gdb)")
    return gdb


class PidLock:
    """An exclusive lock per pid: two heapscope sessions never attach to the same process.

    flock on the process's /proc/PID/mem. Only its owner and root can open that file (the
    permission gdb needs to attach), so no other user can take the lock first and keep root
    out, as anybody could by binding a name in the abstract socket namespace. The kernel frees
    it when we die, and a new process with the same pid has a new file.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise AttachError(f"no process with pid {pid}") from None
        except PermissionError:
            raise AttachError(_ptrace_hint(pid)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise AlreadyProfiled(f"pid {pid} is already being profiled by another heapscope session") from None
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Injection(Record):
    """gdb running heapscope_attach() inside the target, in the background.

    Retries (a new gdb) while every thread of the target is inside the
    allocator or the loader; the caller polls done() and bounds the whole.
    """

    pid: int
    argv: list[str]
    proc: subprocess.Popen[str]
    tries: int = 1
    retry_at: float = 0.0
    output: str = ""
    # gdb makes the calls itself only on a thread stopped in a system call (the script's comment)
    waits_for_syscall: bool = False

    def done(self) -> bool:
        if self.retry_at:
            if time.monotonic() < self.retry_at:
                return False
            self.retry_at = 0.0
            self.tries += 1
            self.proc = _spawn(self.argv)
            return False
        if self.proc.poll() is None:
            return False
        out, err = self.proc.communicate()
        mark = _MARK.search(out)
        if mark is not None and mark.group(1) == "unsafe" and alive(self.pid):
            self.waits_for_syscall = mark.group(2) == "1"
            self.retry_at = time.monotonic() + RETRY_PAUSE_S
            return False
        self.output = out + err
        return True

    def result(self) -> None:
        """After done(): raise unless the client is profiling the process now."""
        text = self.output
        if "ptrace: Operation not permitted" in text or "Could not attach to process" in text:
            if not alive(self.pid):
                raise AttachError(f"pid {self.pid} exited while heapscope was attaching to it")
            raise AttachError(_ptrace_hint(self.pid))
        if "No such process" in text or not alive(self.pid):
            raise AttachError(f"pid {self.pid} exited while heapscope was attaching to it")
        if "Python scripting is not supported" in text:
            raise AttachError("attaching (-p) needs gdb with Python scripting (Debian's gdb has it)")
        values = {m.group(1): m.group(2) for m in _MARK.finditer(text)}
        handle, symbol, result = values.get("handle"), values.get("symbol"), values.get("result")
        if handle is None or handle == "0":
            raise AttachError(f"could not load the client into pid {self.pid} (dlopen failed):\n{_tail(text)}")
        if symbol is None or symbol == "0" or result is None:
            raise AttachError(f"gdb could not call heapscope_attach in pid {self.pid}:\n{_tail(text)}")
        code = int(result, 10)
        if code == ATTACH_BUSY:
            raise AlreadyProfiled(f"pid {self.pid} is already being profiled (it was started under heapscope, "
                                  "or another session attached to it)")
        if code == ATTACH_NO_SESSION:
            raise AttachError(f"the client in pid {self.pid} could not connect to this session")
        if code == ATTACH_DRAINING:
            raise AttachError(f"a thread of pid {self.pid} is still inside the client of its previous session; "
                              "attach again")
        if code == ATTACH_NO_HOOKS:
            raise AttachError(f"pid {self.pid} has no malloc call to intercept (statically linked?)")
        if code != ATTACH_OK:
            raise AttachError(f"heapscope_attach returned {code} in pid {self.pid}")

    def timed_out(self) -> str:
        """Why the attach went on until GDB_TIMEOUT_S, for its error line."""
        if self.waits_for_syscall:
            return (f"no thread of pid {self.pid} waited in a system call (I/O, a sleep, a lock) outside the "
                    "allocator: this gdb cannot restore the vector registers on this CPU, so it calls only there "
                    "(gdb 14 or later attaches at any point)")
        return "is it stopped?"

    def kill(self) -> None:
        """Give up: interrupt gdb first, so that it unwinds a call still running in
        the target (unwindonsignal) and detaches cleanly; kill it only if it hangs."""
        self.retry_at = 0.0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.communicate(timeout=GDB_INTERRUPT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


def start_injection(pid: int, library: str | os.PathLike[str], socket_path: str, token_hex: str) -> Injection:
    """Start gdb, which loads the client into `pid` and calls heapscope_attach()."""
    gdb = find_gdb()
    lib = str(library)
    for s in (lib, socket_path, token_hex):
        if '"' in s or "\\" in s or "%" in s or "\n" in s:
            raise AttachError(f"cannot pass {s!r} to gdb (quote, backslash or newline in a path)")
    general = os.environ.get("HEAPSCOPE_ATTACH_CALLS") == "registers"
    script = (f"LIB = {lib!r}\nSOCK = {socket_path!r}\nTOKEN = {token_hex!r}\nGENERAL_CALLS = {general!r}\n"
              + _GDB_SCRIPT)
    code = binascii.hexlify(script.encode()).decode()
    argv = [
        gdb, "-nx", "-batch", "-p", str(pid),
        "-ex", "set confirm off",
        "-ex", "set scheduler-locking off",
        # An interrupted call is unwound (registers restored) rather than left half-done in the target.
        "-ex", "set unwindonsignal on",
        "-ex", f"python exec(bytes.fromhex('{code}').decode())",
    ]
    return Injection(pid, argv, _spawn(argv))


def _spawn(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def alive(pid: int) -> bool:
    """Is `pid` still running (not gone, not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:][:1] not in (b"Z", b"X", b"")


def _ptrace_hint(pid: int) -> str:
    scope = ""
    with contextlib.suppress(OSError):
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    hint = (f"not permitted to attach to pid {pid} with ptrace. With Yama, allow it with "
            "`sudo sysctl kernel.yama.ptrace_scope=0` (now "
            f"{scope or 'unknown'}), or run heapscope as root; in a container add the SYS_PTRACE capability")
    return hint


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
