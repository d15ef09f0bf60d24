-- Found by tests/fuzz/py_fuzz.py (target profile, a byte-mutated profile).
-- A table whose name in sqlite_master is not valid UTF-8: SQLite's own error
-- message quotes it, and open_profile let UnicodeDecodeError escape instead of
-- saying "corrupt profile" (store/reader.py Profile._validate).
CREATE TABLE zz(a);
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET name = CAST(X'7AFF' AS TEXT) WHERE name = 'zz';
