-- Found by tests/fuzz/py_fuzz.py (target readers): text in a callsite's frame_id, the parent
-- of a callsite below a folded function (`report --fold work`), ended in ValueError; the
-- profile is now said to be damaged in one line.
UPDATE stack_profile_callsite SET frame_id = '' WHERE id = 1;
