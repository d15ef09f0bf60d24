-- Found by tests/fuzz/py_fuzz.py (target rows). Applied to its small valid
-- profile: callsite 1 (a root) gets callsite 3, its own grandchild, as parent.
-- Every command must end with one error line or a result, within seconds.
UPDATE stack_profile_callsite SET parent_id = 3 WHERE id = 1;
