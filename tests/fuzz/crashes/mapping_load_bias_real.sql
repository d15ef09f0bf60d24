-- Found by tests/fuzz/py_fuzz.py (target rows): a REAL in an integer column.
-- `export -f pprof` must say the profile is damaged, not raise ValueError.
UPDATE stack_profile_mapping SET load_bias = -292.7142857142857 WHERE rowid = 1;
