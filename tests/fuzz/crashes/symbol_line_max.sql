-- Found by tests/fuzz/py_fuzz.py (target readers): a line number of 2^63 - 1 in a symbol row
-- made report's stacks (the merged tree's renumbering, in C) end in ValueError, "a node's
-- parent out of range": the check of the lines' range shut out the largest value.
UPDATE stack_profile_symbol SET line_number = 9223372036854775807;
