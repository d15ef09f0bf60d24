"""The handshake's part of wire.h, for the start of `heapscope record` (light imports: start-up cost).

What the producer needs to answer a client's hello (the sizes, the hello and
config layouts, the ring's header fields) with nothing but `struct`: codec.py
(enums, record classes) cost the start ~5 ms of CPU to import, before the
target could get its answer. codec.py re-exports every name here, so the
layouts are defined once and tests/unit/wire checks them against the C
compiler's through codec.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    import mmap

WIRE_MAGIC = 0x31575350414548
WIRE_VERSION = 9
TOKEN_SIZE = 16
META_SIZE = 4096
RING_MIN_SIZE = 4096  # the data ring: a power of two in [RING_MIN_SIZE, RING_MAX_SIZE]
RING_MAX_SIZE = 1 << 30
MAX_FRAMES = 256

ENV_SOCKET = "HEAPSCOPE_SOCKET"
ENV_TOKEN = "HEAPSCOPE_TOKEN"

# enum hs_status, enum hs_unwinder (codec.Status and codec.Unwinder take their values from these)
STATUS_OK, STATUS_REJECTED, STATUS_NOT_TARGETED = 0, 1, 2
UNWINDER_AUTO, UNWINDER_LIBUNWIND, UNWINDER_FP, UNWINDER_NONE, UNWINDER_CFA = 0, 1, 2, 3, 4
CFG_BLOCK_CLIENT = 1
CFG_MMAP_FILES = 2  # the mmap heap counts file-backed and shared mappings too
CFG_TSC = 4  # wire.h HS_CFG_TSC: records stamped with the TSC, converted by the producer

HELLO = struct.Struct("<QIIII16sQ")
CONFIG = struct.Struct("<QIIQQQIIII")

# struct hs_ring_meta: field name -> (offset, struct format)
META_FIELDS: dict[str, tuple[int, str]] = {
    "magic": (0, "<Q"),
    "version": (8, "<I"),
    "ring_size": (16, "<Q"),
    "write_pos": (64, "<Q"),
    "read_pos": (128, "<Q"),
    "shutting_down": (192, "<I"),
    "client_state": (196, "<I"),
    "client_error": (200, "<I"),
    "unwinder": (204, "<I"),
    "blocked_ns": (208, "<Q"),
    "dropped_records": (216, "<Q"),
    "unwinding_errors": (224, "<Q"),
    "unwind_ns": (232, "<Q"),
    "stack_table_full": (240, "<Q"),
    "addr_table_full": (248, "<Q"),
    "truncated_stacks": (256, "<Q"),
    "module_rescans": (264, "<Q"),
    "python_walks": (272, "<Q"),
    "python_walks_invalid": (280, "<Q"),
    "python_walks_truncated": (288, "<Q"),
    "python_codes_sent": (296, "<Q"),
    "python_codes_failed": (304, "<Q"),
    "exit_peak_rss": (312, "<Q"),  # the client's last destructor: VmHWM then, bytes (0: not known)
    "own_rss": (320, "<Q"),  # and heapscope's own mappings resident then, bytes (0: not known)
    "exit_ts": (328, "<Q"),  # and when, CLOCK_MONOTONIC ns (0: not known)
    "direct_map_calls": (336, "<Q"),  # mmap/munmap/mremap/brk through syscall(2): not in the mmap, brk heaps
    "direct_map_bytes": (344, "<Q"),  # the bytes those mmap, mremap and brk calls asked for
}


def config_reply(status: int, interval: int = 0, ring_size: int = 0, seed: int = 0, flags: int = 0,
                 unwinder: int = 0, max_frames: int = 0) -> bytes:
    """A struct hs_config of this wire version (codec.Config.pack)."""
    return CONFIG.pack(WIRE_MAGIC, WIRE_VERSION, status, interval, ring_size, seed, flags, unwinder, max_frames, 0)


def read_meta(shm: mmap.mmap | bytes, name: str) -> int:
    """A field of the ring's header (struct hs_ring_meta)."""
    off, fmt = META_FIELDS[name]
    return int(struct.unpack_from(fmt, shm, off)[0])


def write_meta(shm: mmap.mmap, name: str, value: int) -> None:
    off, fmt = META_FIELDS[name]
    struct.pack_into(fmt, shm, off, value)
