"""What a recording is asked to do (validated before any target starts)."""

from __future__ import annotations

from heapscope.errors import UsageError
from heapscope.records import Record
from heapscope.wire.handshake import MAX_FRAMES, RING_MAX_SIZE, RING_MIN_SIZE, UNWINDER_AUTO

# On `record`'s start path (the target waits for its handshake's answer, producer/listener.py):
# no codec (enums), no fnmatch (re), no math (a C extension to load) at import (start-up cost).

DEFAULT_INTERVAL = 4096
DEFAULT_SHMEM_SIZE = 8 << 20
# A mean of 1 TiB between samples is far beyond any heap (an interval past the
# total allocated bytes records nothing); it keeps the client's 64-bit
# countdown arithmetic (interval times the exponential draw) far from overflow.
MAX_INTERVAL = 1 << 40
MAX_SEED = (1 << 64) - 1
MAX_DUMP_MS = 7 * 24 * 3600 * 1000  # a week between dumps: anything longer is a typo
MAX_DURATION_S = 366 * 24 * 3600.0  # --duration


class RecordConfig(Record, frozen=True):
    interval: int = DEFAULT_INTERVAL  # mean bytes between samples; 1 = every allocation
    seed: int | None = None  # sampler seed; None = a random one per process
    unwinder: int = UNWINDER_AUTO  # codec.Unwinder's values (an Unwinder is one)
    shmem_size: int = DEFAULT_SHMEM_SIZE  # ring bytes per process
    block_client: bool = True  # a full ring makes the target wait, never drops
    mmap_files: bool = False  # the mmap heap counts file-backed and shared mappings too (client/maps.c)
    skip_symbol_prefixes: tuple[str, ...] = ()  # mappings shown as one FILTERED frame
    stream_allocations: bool = False  # also store every malloc and free raw
    max_frames: int = 128
    dump_at_max: bool = False  # dumps show the peak of unfreed sampled bytes, not the end state
    names: tuple[str, ...] = ()  # -n: profile only processes whose name matches one (empty = all)
    threads: bool = False  # keep totals per (stack, thread) too: `live`'s thread filter

    def __post_init__(self) -> None:
        if not 1 <= self.interval <= MAX_INTERVAL:
            raise UsageError(f"--interval must be between 1 and {MAX_INTERVAL} bytes (1 TiB), not {self.interval}")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"--seed must be between 0 and 2^64-1, not {self.seed}")
        for name in self.names:
            if not name.strip():
                raise UsageError("-n/--name must not be empty")
        for prefix in self.skip_symbol_prefixes:
            if not prefix:
                raise UsageError("--skip-symbol-prefix must not be empty")
        s = self.shmem_size
        if s < RING_MIN_SIZE or s & (s - 1) or s > RING_MAX_SIZE:
            raise UsageError(
                f"--shmem-size must be a power of two between {RING_MIN_SIZE} and {RING_MAX_SIZE}, not {s}")
        if not 1 <= self.max_frames <= MAX_FRAMES:
            raise UsageError(f"--max-frames must be between 1 and {MAX_FRAMES}, not {self.max_frames}")


def check_positive(value: float | None, what: str, limit: float) -> float | None:
    """A finite number in (0, limit], or None; anything else is a UsageError."""
    if value is None:
        return None
    import math

    if not math.isfinite(value) or value <= 0 or value > limit:
        raise UsageError(f"{what} must be a positive number up to {limit:g}, not {value!r}")
    return value


def check_ms(value: int, what: str) -> int:
    """Milliseconds in [0, MAX_DUMP_MS]."""
    if not 0 <= value <= MAX_DUMP_MS:
        raise UsageError(f"{what} must be milliseconds between 0 and {MAX_DUMP_MS}, not {value}")
    return value


def normalize_cmdline(argv0: str) -> str:
    """heapprofd's normalization (proc_utils.cc): argv0, cut at the first '@', basename."""
    return argv0.split("@", 1)[0].rsplit("/", 1)[-1]


def name_matches(patterns: tuple[str, ...], exe: str, args: list[str]) -> bool:
    """Does a process match one of the -n patterns?

    A pattern is normalized like the process's argv0 and compared with it and
    with the executable's basename; a pattern with `*` is a glob (a leading
    `/` globs the full argv0); a pattern with a space is compared with the
    whole command line.
    """
    argv0 = args[0] if args else exe
    names = {normalize_cmdline(argv0), exe.rsplit("/", 1)[-1]}
    for pat in patterns:
        if " " in pat and pat == " ".join(args):
            return True
        if "*" in pat:
            import fnmatch  # here: re is ~3 ms of imports, and only a glob needs it

            target = [argv0.split("@", 1)[0]] if pat.startswith("/") else names
            if any(fnmatch.fnmatchcase(t, pat) for t in target):
                return True
        elif normalize_cmdline(pat) in names:
            return True
    return False
