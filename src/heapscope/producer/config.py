"""What a recording is asked to do (validated before any target starts)."""

from __future__ import annotations

from dataclasses import dataclass

from heapscope.errors import UsageError
from heapscope.wire.codec import MAX_FRAMES, Unwinder

DEFAULT_INTERVAL = 4096
DEFAULT_SHMEM_SIZE = 8 << 20
MAX_SHMEM_SIZE = 512 << 20


@dataclass(frozen=True, slots=True)
class RecordConfig:
    interval: int = DEFAULT_INTERVAL  # mean bytes between samples; 1 = every allocation
    seed: int | None = None  # sampler seed; None = a random one per process
    unwinder: Unwinder = Unwinder.AUTO
    shmem_size: int = DEFAULT_SHMEM_SIZE  # ring bytes per process
    block_client: bool = True  # a full ring makes the target wait, never drops
    skip_symbol_prefixes: tuple[str, ...] = ()  # mappings shown as one FILTERED frame
    stream_allocations: bool = False  # also store every malloc and free raw
    max_frames: int = 128

    def __post_init__(self) -> None:
        if self.interval < 1:
            raise UsageError(f"--interval must be a positive number of bytes, not {self.interval}")
        s = self.shmem_size
        if s < 8192 or s % 4096 or s & (s - 1) or s > MAX_SHMEM_SIZE:
            raise UsageError(
                f"--shmem-size must be a power of two between 8192 and {MAX_SHMEM_SIZE}, not {s}")
        if not 1 <= self.max_frames <= MAX_FRAMES:
            raise UsageError(f"--max-frames must be between 1 and {MAX_FRAMES}, not {self.max_frames}")


def parse_size(text: str, what: str) -> int:
    """'4096', '64k', '8M', '1G' -> bytes; anything else is a UsageError."""
    t = text.strip().lower()
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    mult = 1
    if t[-1:] == "b":
        t = t[:-1]
    if t[-1:] in units:
        mult = units[t[-1]]
        t = t[:-1]
    try:
        value = int(t, 10)
    except ValueError:
        raise UsageError(f"{what} must be a number of bytes (like 4096 or 64k), not {text!r}") from None
    if value < 1:
        raise UsageError(f"{what} must be a positive number of bytes, not {text!r}")
    return value * mult
