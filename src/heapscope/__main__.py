"""`python -m heapscope`: the command line, as the `heapscope` command (cli/launcher.c) runs it.

May import: heapscope.cli.
"""

from heapscope.cli.start import run

run()
