"""`python -m heapscope`: the command line, as the console script runs it.

May import: heapscope.cli.
"""

from heapscope.cli.start import run

run()
