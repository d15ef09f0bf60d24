"""Reports built from a profile database, as typed rows; printing is cli/'s job.

    report.py  top functions per process: self and total for each view
    units.py   human-readable bytes, counts and percentages
    tree.py    the merged call tree (experimental_flamegraph's rule, focus, path filters)
    _paths.c   the per-callsite loops of tree.py and report.py in C (merge, preorder, totals)
    flamegraph.py  the self-contained HTML page (templates/: page, hand-written JS and CSS)
    flamegraph_heaps.py  the page's graphs of every heap, and of their sum added up from theirs
    memory.py  the page's memory-over-time chart: its series and the samples behind a range
    diff.py    growth per call path between two snapshots, matched by function and library
    leaks.py   call stacks never freed by a process's final dump

May import: heapscope.store, heapscope.estimate, heapscope.model, heapscope.errors, heapscope.records,
heapscope.units, heapscope.jsontext.
"""
