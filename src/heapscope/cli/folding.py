"""The options that fold allocator wrappers (view/wrappers.py), shared by every view command."""

from __future__ import annotations

import argparse

from heapscope.store.reader import Profile
from heapscope.view.wrappers import fold_wrappers


def add_fold_arguments(p: argparse.ArgumentParser) -> None:
    """--keep-wrappers and --fold REGEX."""
    p.add_argument("--keep-wrappers", action="store_true",
                   help="show allocator wrappers (xmalloc, operator new, zmalloc, g_malloc, PyMem_*, ...) as"
                        " frames of their own; by default each is folded into its caller")
    p.add_argument("--fold", metavar="REGEX", action="append", default=[],
                   help="fold functions whose name matches REGEX (fully, without parameters) into their callers"
                        " too: a project's own allocator wrappers; repeatable")


def apply_fold(profile: Profile, args: argparse.Namespace) -> list[str]:
    """Fold as the options ask, before anything reads `profile`'s stacks; the names folded."""
    return fold_wrappers(profile, keep=bool(getattr(args, "keep_wrappers", False)),
                         extra=list(getattr(args, "fold", None) or []))
