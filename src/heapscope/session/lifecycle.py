"""Start a target (or attach to running ones) under a recording."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

from heapscope import __version__, sigmask
from heapscope.errors import AttachError, TargetError, UsageError
from heapscope.launch import Launch, raise_nofile
from heapscope.producer.producer import Producer
from heapscope.session.core import DETACH_SIGNALS, IDLE_POLL_S, _describe
from heapscope.session.teardown import Teardown
from heapscope.store.writer import ProfileWriter

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from heapscope.producer.attach import PidLock


class Recording(Teardown):
    """Start or attach, loop, dump, guard, tear down; see heapscope.session's docstring."""

    def __enter__(self) -> Recording:
        # Other runs' leftovers: not a reason for the target to wait (~2 ms on a busy /tmp).
        self._chores.append((self._remove_stale_dirs, True))
        self._install_signal(signal.SIGUSR1, self._on_usr1)
        if threading.current_thread() is threading.main_thread():
            self._old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _open(self, command: str, launch: Launch | None = None) -> Producer:
        """The profile and the producer: fails here, before any target is touched (or, with a
        `launch` that started it, takes over what the launch did)."""
        if self.producer is not None:
            raise UsageError("a Recording records one target (or one set of pids) only")
        if not self.options.keep:  # nothing written: no writer (self.writer stays None)
            self.producer = Producer(None, self.config, log=self.log,
                                     listener=launch.listener if launch is not None else None)
            self.started = launch.started if launch is not None else time.monotonic()
            return self.producer
        # The output is checked and its files created now (by `record`'s launch, before its target
        # started); the database and its schema (~4 ms) when first written to: when the producer's
        # poll adopts the first client, after the client has its answer, or by the chore below
        #. Should that fail, the failure is the loop's like any other (_fail): one line,
        # the clients let go, the target supervised.
        writer = ProfileWriter(self.output, force=self.options.force, connect=False,
                               created=launch is not None and launch.created)
        self.writer = writer
        metadata = (("heapscope_version", __version__), ("command", self.options.command or command),
                    ("interval", self.config.interval),
                    # one moment on both clocks (fleet/pprof_source.py maps the profile's times with them)
                    ("started_unix_ns", launch.started_unix_ns if launch is not None else time.time_ns()),
                    ("started_monotonic_ns", launch.started_monotonic_ns if launch is not None
                     else time.monotonic_ns()))
        self._metadata = metadata
        self._chores.insert(0, (self._write_metadata, True))
        self.producer = Producer(writer, self.config, log=self.log,
                                 listener=launch.listener if launch is not None else None)
        self.started = launch.started if launch is not None else time.monotonic()
        return self.producer

    def start(self, argv: list[str], executable: str | None = None,
              stdin: int | None = None, stdout: int | None = None, stderr: int | None = None) -> int:
        """Start `argv` under the client; its pid. `stdin`/`stdout`/`stderr`: None, a descriptor
        or subprocess.DEVNULL. With the Recording's `launch`, the target it started is taken over."""
        if not argv:
            raise UsageError("no command to profile")
        launch = self._launch
        if launch is not None and launch.child is not None:
            producer = self._open(" ".join(argv), launch)
            self._dumps_requested += ["signal"] * launch.dumps_requested
            launch.dumps_requested = 0
        else:
            producer = self._open(" ".join(argv))
            launch = Launch(self.config, self.log, listener=producer.listener)
            if self.options.forward_signals:
                launch.forward_signals(install=self._install_signal, usr1=False,
                                       job_control=self.options.job_control)
            launch.spawn(argv, executable, self.library, stdin, stdout, stderr)
        assert launch.child is not None
        self.child = launch.child
        self._spawned = launch.spawned
        self._child_fd = launch.take_pidfd()
        producer.target_pids.add(self.child.pid)
        producer.exit_peak = self._child_peak_rss
        # heapscope's own limit, raised after the spawn: the target has the one it would have had.
        self._nofile = launch.nofile
        launch.nofile = None
        self._raise_nofile()
        self._start_symbolizer()
        # Only the summary uses what this finds (why the target cannot be preloaded): after the spawn.
        self._chores.append((lambda: self._check_preload(argv[0], executable), True))
        self._warm_up()
        return self.child.pid

    def _child_peak_rss(self, pid: int) -> int:
        """The started target's exact peak RSS, reaped now if it is gone (the producer asks when its
        process ends); 0 when not known (launch.Child.peak_rss)."""
        child = self.child
        if child is None or child.pid != pid:
            return 0
        child.poll()
        return child.peak_rss()

    def attach(self, pids: list[int]) -> list[int]:
        """Attach to running processes; the pids attached. Refusals before any
        attach raise AttachError, as does an attach to none of them (then no
        profile is written); later failures are collected in `errors`."""
        from heapscope.producer import attach  # gdb injection: only -p needs it

        for pid in pids:
            attach.check_target(pid)
        attach.find_gdb()
        # Locked before the profile is created: a pid that another session profiles is refused
        # with nothing written, and one of several refused is counted in the profile.
        locks: dict[int, PidLock] = {}
        refused: list[int] = []
        try:
            for pid in pids:
                try:
                    locks[pid] = attach.PidLock(pid)
                except attach.AlreadyProfiled as e:
                    refused.append(pid)
                    self.errors.append(str(e))
        except AttachError:
            for lock in locks.values():
                lock.release()
            raise
        if not locks:
            raise AttachError("; ".join(self.errors))
        producer = self._open("-p " + ",".join(map(str, pids)))
        for pid in refused:
            producer.reject_concurrent(pid)
        self._raise_nofile()
        for sig in DETACH_SIGNALS:
            self._install_signal(sig, self._on_stop)
        sigmask.release()  # held back since the entry point: these handlers take them now
        for pid, lock in locks.items():
            if self._stopping:
                lock.release()
                continue
            self._attach_one(producer, pid, lock)
        if not self.attached and self.errors:
            self._discard = True  # nothing was profiled: close() removes the profile
            raise AttachError("; ".join(self.errors))
        self._start_symbolizer()
        self._warm_up()
        return list(self.attached)

    def _attach_one(self, producer: Producer, pid: int, lock: PidLock) -> None:
        from heapscope.producer import attach

        producer.attach_pids.add(pid)
        producer.target_pids.add(pid)
        t0 = time.monotonic()
        env = producer.client_env()
        try:
            injection = attach.start_injection(pid, self.library, env["HEAPSCOPE_SOCKET"], env["HEAPSCOPE_TOKEN"])
            while not injection.done():
                if time.monotonic() - t0 > attach.GDB_TIMEOUT_S:
                    injection.kill()
                    raise AttachError(f"attaching to pid {pid} timed out after {attach.GDB_TIMEOUT_S:.0f} s "
                                      f"({injection.timed_out()})")
                self._poll(IDLE_POLL_S)
            injection.result()
        except attach.AlreadyProfiled as e:
            producer.attach_pids.discard(pid)
            producer.reject_concurrent(pid)
            lock.release()
            self.errors.append(str(e))
            return
        except TargetError as e:
            producer.attach_pids.discard(pid)
            lock.release()
            self.errors.append(str(e))
            return
        self._locks.append(lock)
        self.attached.append(pid)
        self.say(f"attached to pid {pid} in {(time.monotonic() - t0) * 1000:.1f} ms")

    def _raise_nofile(self) -> None:
        if self._nofile is None:
            self._nofile = raise_nofile()

    def _start_symbolizer(self) -> None:
        if not self.options.symbolize or self.producer is None or self.writer is None:
            return
        try:
            # Cheap: it only notes modules; warming starts from the loop if the target runs a while.
            from heapscope.symbolize.live import LiveSymbolizer
            self._symbolizer = LiveSymbolizer(writer=self.writer)
            self.producer.on_module = self._symbolizer.module
            self.producer.on_process_end = self._symbolizer.process_ended  # its perf map, for JIT frames
        except Exception as e:  # symbolization is a bonus: never a reason to stop
            self.warn(f"symbolization unavailable: {_describe(e)}")
            self._symbolizer = None

    def _check_preload(self, program: str, executable: str | None) -> None:
        """Note why the started target cannot get the client (static, setuid), for the summary."""
        path = executable or (program if "/" in program else None)
        if not path:  # `record` passes the executable it found (cli/record.py)
            from heapscope.which import which

            path = which(program) or program
        why: str | None = None
        with contextlib.suppress(Exception):
            from heapscope.symbolize.preload import preload_blocker
            why = preload_blocker(path)
        self._target = (path, why)
        if why:
            self.log(f"{path}: {why}")
