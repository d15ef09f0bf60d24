"""Reports built from a profile database, as typed rows; printing is cli/'s job.

    report.py  top functions per process: self and total for each view
    units.py   human-readable bytes, counts and percentages

May import: heapscope.store, heapscope.model, heapscope.errors.
"""
