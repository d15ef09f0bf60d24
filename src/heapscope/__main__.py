from heapscope.cli import run

run()
