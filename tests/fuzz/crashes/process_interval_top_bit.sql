-- Found by tests/fuzz/py_fuzz.py (target readers): a sampling interval of 2^63 (stored as the
-- int64 -2^63, read as a u64). `leaks` raised OverflowError in the C de-sampling of selfs.
UPDATE heapscope_process SET sampling_interval_bytes = -9223372036854775808 WHERE rowid = 1;
