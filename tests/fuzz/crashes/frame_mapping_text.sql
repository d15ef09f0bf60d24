-- Found by tests/fuzz/py_fuzz.py (target rows): text in an integer column.
-- Every export must say the profile is damaged, not raise ValueError.
UPDATE stack_profile_frame SET mapping = '8B' WHERE rowid = 1;
