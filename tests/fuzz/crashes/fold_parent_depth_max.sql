-- Found by tests/fuzz/py_fuzz.py (target readers): a depth of 2^63 - 1 on the parent of a
-- callsite below a folded function (`report --fold work`) gave its child a depth of 2^63,
-- and writing the folded callsites ended in OverflowError; the profile is now said to be damaged.
UPDATE stack_profile_callsite SET depth = 9223372036854775807 WHERE id = 1;
