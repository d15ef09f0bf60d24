"""Errors heapscope reports to its users.

    HeapscopeError            one clear line for the user; exit status 1
    ├── UsageError            bad arguments (exit 2); the target never starts
    │   ├── UnknownViewError  a view name that is not one of heapscope.model.VIEWS
    │   └── UnknownDumpError  a dump number a process does not have
    ├── UnknownProcessError   no process of the profile has the pid asked for
    ├── OutputError           a file cannot be written (or must not be replaced)
    ├── ProfileError          an input file is not a readable heapscope profile
    ├── SqlError              a statement `heapscope sql` refuses or SQLite rejects
    └── TargetError           the command to profile cannot be started (exit 127, a shell's
        │                     "command not found")
        └── AttachError       `record -p`: no process could be attached to, and why (exit 3);
                              nothing is written

Every command raises the same class, with the same wording, for the same
mistake (heapscope.store.select builds those lines). Only heapscope.cli
prints them; everything else raises.

May import: nothing of heapscope.
"""

from __future__ import annotations


class HeapscopeError(Exception):
    exit_code = 1


class UsageError(HeapscopeError):
    exit_code = 2


class UnknownViewError(UsageError):
    pass


class UnknownDumpError(UsageError):
    pass


class UnknownProcessError(HeapscopeError):
    pass


class OutputError(HeapscopeError):
    pass


class ProfileError(HeapscopeError):
    pass


class SqlError(HeapscopeError):
    pass


class TargetError(HeapscopeError):
    exit_code = 127


class AttachError(TargetError):
    exit_code = 3
