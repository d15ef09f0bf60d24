-- Found by tests/fuzz/py_fuzz.py (target rows): a REAL callsite id.
-- `export -f perfetto` must say the profile is damaged, not raise ValueError.
UPDATE heap_profile_allocation SET callsite_id = 1257.2857142857142 WHERE rowid = 1;
