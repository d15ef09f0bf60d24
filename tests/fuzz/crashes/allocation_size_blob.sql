-- Found by tests/fuzz/py_fuzz.py (target rows): a BLOB where an integer belongs.
-- `export -f perfetto` must say the profile is damaged, not raise ValueError.
UPDATE heap_profile_allocation SET size = X'00' WHERE rowid = 1;
