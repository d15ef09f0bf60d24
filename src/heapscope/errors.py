"""Errors heapscope reports to its users.

    HeapscopeError            one clear line for the user; exit status 1
    ├── UsageError            bad arguments (exit 2); the target never starts
    ├── OutputError           the profile cannot be written
    ├── ProfileError          an input file is not a readable heapscope profile
    └── TargetError           the command to profile cannot be started

Only heapscope.cli prints them; everything else raises.
"""

from __future__ import annotations


class HeapscopeError(Exception):
    exit_code = 1


class UsageError(HeapscopeError):
    exit_code = 2


class OutputError(HeapscopeError):
    pass


class ProfileError(HeapscopeError):
    pass


class TargetError(HeapscopeError):
    exit_code = 127
