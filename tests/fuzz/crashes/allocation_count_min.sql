-- Found by tests/fuzz/py_fuzz.py (target readers): a count of -2^63 in an allocation row made
-- `report --view objects` (its estimate of objects, past 126 bits) end in OverflowError from
-- report's walk in C (view/_totals.c); the profile is now said to be damaged.
UPDATE heap_profile_allocation SET heap_name = -58 WHERE rowid = 1;
UPDATE heap_profile_allocation SET count = -9223372036854775808 WHERE rowid = 2;
UPDATE heap_profile_allocation SET callsite_id = -58 WHERE rowid = 3;
UPDATE heap_profile_allocation SET real_size = 5 WHERE rowid = 2;
