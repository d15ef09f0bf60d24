-- Found by tests/fuzz/py_fuzz.py (target rows): an empty BLOB as a callsite id.
-- `flamegraph` must say the profile is damaged, not raise ValueError.
UPDATE heap_profile_allocation SET callsite_id = X'' WHERE rowid = 1;
