-- Found by tests/fuzz/py_fuzz.py (target readers, a byte patched): a NUL in the name of a
-- mapping with an unnamed frame made `report` end in ValueError (asking dpkg which package
-- owns the file resolved the name first); a name with a NUL is no file, and is not asked about.
UPDATE stack_profile_mapping SET name = '/usr/bin/pr' || char(0) || 'g' WHERE id = 1;
