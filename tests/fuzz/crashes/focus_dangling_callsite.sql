-- Found by tests/fuzz/py_fuzz.py (target readers): a callsite that dump rows name has no row
-- (deleted), and `report --focus` ended in KeyError; it now leaves it out (no function of its
-- path can match), as every other view does.
DELETE FROM stack_profile_callsite WHERE id = 5;
