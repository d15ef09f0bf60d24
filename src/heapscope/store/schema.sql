-- The heapscope profile database. Table and column names follow Perfetto's
-- trace_processor, so queries written for heapprofd traces run unchanged.
-- heapscope's own additions are prefixed `heapscope_`.
--
-- Integers. Columns marked "u64" hold unsigned 64-bit values (addresses,
-- offsets, sizes, intervals) that may be 2^63 or more. SQLite's INTEGER is a
-- signed 64-bit number, so such a value is stored as the signed integer with
-- the same 64 bits (two's complement: 2^64 - 1 is stored as -1), as Perfetto's
-- trace_processor stores them; heapscope's reader turns them back
-- (store/values.py). Equality and grouping work on the stored values as they
-- are; an ORDER BY or a comparison on a u64 column sees values >= 2^63 as
-- negative. The other integer columns are signed and clamped to int64.

CREATE TABLE IF NOT EXISTS heapscope_metadata (
  key TEXT PRIMARY KEY,
  value TEXT
);

-- One row per profiled process (an exec'd child is a new upid).
CREATE TABLE IF NOT EXISTS process (
  upid INTEGER PRIMARY KEY,
  id INTEGER GENERATED ALWAYS AS (upid) VIRTUAL,
  pid INTEGER NOT NULL,
  name TEXT,                -- executable basename
  cmdline TEXT,             -- arguments joined by spaces
  start_ts INTEGER,         -- ns, CLOCK_MONOTONIC
  end_ts INTEGER,
  parent_upid INTEGER,
  uid INTEGER
);

-- Per-process facts heapprofd puts in ProcessHeapSamples.
CREATE TABLE IF NOT EXISTS heapscope_process (
  upid INTEGER PRIMARY KEY,
  exe TEXT,
  ppid INTEGER,
  from_startup INTEGER,
  disconnected INTEGER,
  buffer_overran INTEGER,
  buffer_corrupted INTEGER,
  rejected_concurrent INTEGER,
  hit_guardrail INTEGER,
  client_error TEXT,
  unwinder TEXT,
  sampling_interval_bytes INTEGER,       -- u64
  orig_sampling_interval_bytes INTEGER   -- u64
);

CREATE TABLE IF NOT EXISTS stats (
  name TEXT NOT NULL,
  idx INTEGER,              -- upid for per-process stats, else NULL
  severity TEXT NOT NULL,   -- info, data_loss, error
  source TEXT NOT NULL,     -- client, producer
  value INTEGER NOT NULL,
  description TEXT
);

CREATE TABLE IF NOT EXISTS stack_profile_mapping (
  id INTEGER PRIMARY KEY,
  build_id TEXT,            -- hex, '' when unknown
  exact_offset INTEGER,     -- u64
  start_offset INTEGER,     -- u64
  start INTEGER,            -- u64
  "end" INTEGER,            -- u64
  load_bias INTEGER,        -- u64
  name TEXT
);

-- The Debian package of each file with frames left nameless when `record` ended ('' when none):
-- what `report` names for the fix without asking dpkg again.
CREATE TABLE IF NOT EXISTS heapscope_mapping_package (
  name TEXT PRIMARY KEY,    -- the file's path, as stack_profile_mapping.name
  package TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS stack_profile_frame (
  id INTEGER PRIMARY KEY,
  name TEXT,                -- function name (demangled), '' until symbolized
  mapping INTEGER NOT NULL REFERENCES stack_profile_mapping(id),
  rel_pc INTEGER NOT NULL,  -- u64: address in the ELF file's virtual address space
  symbol_set_id INTEGER,
  deobfuscated_name TEXT,
  type TEXT
);

CREATE TABLE IF NOT EXISTS stack_profile_callsite (
  id INTEGER PRIMARY KEY,
  depth INTEGER NOT NULL,   -- 0 = root (outermost frame)
  parent_id INTEGER,
  frame_id INTEGER NOT NULL REFERENCES stack_profile_frame(id)
);

CREATE TABLE IF NOT EXISTS stack_profile_symbol (
  id INTEGER PRIMARY KEY,
  symbol_set_id INTEGER NOT NULL,
  name TEXT,
  source_file TEXT,
  line_number INTEGER,
  inlined INTEGER
);

-- Per dump and callsite: a positive row for what was allocated since the
-- previous dump and a negative row for what was freed, so
-- SUM(size) WHERE ts <= T is the unreleased bytes at T.
CREATE TABLE IF NOT EXISTS heap_profile_allocation (
  id INTEGER PRIMARY KEY,
  ts INTEGER NOT NULL,
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  callsite_id INTEGER NOT NULL,
  count INTEGER NOT NULL,
  size INTEGER NOT NULL,
  -- heapscope: the real (asked-for) bytes of the same samples, for de-sampled
  -- allocation counts (heapscope/estimate.py); NULL in older profiles.
  real_size INTEGER
);

-- Each process's peak of sampled unreleased bytes (heapprofd's dump_at_max
-- state, kept in every profile), written at its final dump: cumulative rows,
-- not deltas, one per callsite with something allocated up to the peak.
CREATE TABLE IF NOT EXISTS heapscope_peak_allocation (
  ts INTEGER NOT NULL,           -- when the process reached its peak (CLOCK_MONOTONIC ns)
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  callsite_id INTEGER NOT NULL,
  count INTEGER NOT NULL,        -- sampled allocations not freed at the peak
  size INTEGER NOT NULL,         -- sampled bytes not freed at the peak
  alloc_count INTEGER NOT NULL,  -- sampled allocations made up to the peak
  alloc_size INTEGER NOT NULL,   -- sampled bytes allocated up to the peak
  real_size INTEGER,             -- real bytes of the samples not freed at the peak (NULL in older profiles)
  alloc_real_size INTEGER        -- real bytes of the samples made up to the peak
);

-- How long each callsite's sampled allocations lived (client timestamps of the
-- malloc and of the free, CLOCK_MONOTONIC), written at the process's final dump:
-- cumulative rows, one per (callsite, kind, bucket) with samples. kind: 'freed'
-- (lo_ns <= lifetime < hi_ns), 'held' (still live at the end, by age at the
-- latest timestamp of the process), 'unknown' (freed, no timestamp: lo_ns 0),
-- 'heaptrack' (freed before the allocating thread's next malloc: exact at
-- interval 1; lo_ns 0). hi_ns NULL: no upper bound. Absent in older profiles.
CREATE TABLE IF NOT EXISTS heapscope_callsite_lifetime (
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  callsite_id INTEGER NOT NULL,
  kind TEXT NOT NULL,
  lo_ns INTEGER NOT NULL,
  hi_ns INTEGER,
  size_lo INTEGER NOT NULL,      -- the samples' asked-for sizes, in [size_lo, size_hi): one
  size_hi INTEGER NOT NULL,      -- power-of-two class a row (estimates need one size)
  count INTEGER NOT NULL,        -- samples
  size INTEGER NOT NULL,         -- their sampled bytes
  real_size INTEGER NOT NULL     -- their asked-for bytes (heapscope/estimate.py)
);

-- The sizes each callsite asked for, in log2 buckets [lo, hi) (0 and 1 in
-- [0, 2)), every sampled allocation, written with the lifetimes.
CREATE TABLE IF NOT EXISTS heapscope_callsite_size (
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  callsite_id INTEGER NOT NULL,
  lo INTEGER NOT NULL,
  hi INTEGER NOT NULL,
  count INTEGER NOT NULL,
  size INTEGER NOT NULL,
  real_size INTEGER NOT NULL
);

-- One row per dump of a process heap, also when nothing changed.
CREATE TABLE IF NOT EXISTS heap_profile (
  id INTEGER PRIMARY KEY,
  ts INTEGER NOT NULL,      -- window start
  ts_end INTEGER NOT NULL,  -- = heap_profile_allocation.ts of this dump
  dur INTEGER NOT NULL,
  upid INTEGER NOT NULL,
  heap_name TEXT,
  reason TEXT               -- exit, end, periodic, signal, peak
);

-- --stream-allocations: every sampled malloc and sent free, raw.
CREATE TABLE IF NOT EXISTS heapscope_allocation_stream (
  upid INTEGER NOT NULL,
  seq INTEGER NOT NULL,     -- u64
  kind TEXT NOT NULL,       -- malloc, free
  ts INTEGER,
  address INTEGER NOT NULL, -- u64
  size INTEGER,             -- u64
  sample_size INTEGER,      -- u64
  callsite_id INTEGER
);

-- Allocation labels (docs/labels.md): each process's label sets, one row per (key, value);
-- label_set_id is the process's own (the client interns them), unique with upid.
CREATE TABLE IF NOT EXISTS heapscope_label (
  upid INTEGER NOT NULL,
  label_set_id INTEGER NOT NULL,
  key TEXT NOT NULL,
  value TEXT NOT NULL
);

-- heap_profile_allocation's rows of the labelled samples, per label set as well:
-- summed over label_set_id they are the labelled part of heap_profile_allocation
-- (a sample without labels has rows there only).
CREATE TABLE IF NOT EXISTS heapscope_label_allocation (
  ts INTEGER NOT NULL,
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  callsite_id INTEGER NOT NULL,
  label_set_id INTEGER NOT NULL,
  count INTEGER NOT NULL,
  size INTEGER NOT NULL,
  real_size INTEGER
);

-- heapscope_peak_allocation's rows per label set (the labelled samples' part).
CREATE TABLE IF NOT EXISTS heapscope_label_peak_allocation (
  ts INTEGER NOT NULL,
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  callsite_id INTEGER NOT NULL,
  label_set_id INTEGER NOT NULL,
  count INTEGER NOT NULL,
  size INTEGER NOT NULL,
  alloc_count INTEGER NOT NULL,
  alloc_size INTEGER NOT NULL,
  real_size INTEGER,
  alloc_real_size INTEGER
);

CREATE INDEX IF NOT EXISTS heap_profile_allocation_upid_ts
  ON heap_profile_allocation(upid, ts);
-- No index on stack_profile_callsite(parent_id): every reader walks a stack up from its leaf
-- by id. Kept up as the rows went in, it was 40% of the callsites' write (a compiler's 132k).

-- Each process heap's memory over time, kept by the tracker as ops are applied
-- (bookkeeping/tracker_series.h), written at the process's final dump: a point
-- per span of activity, 10 ms or coarser on a long run (at most 4096 a heap,
-- neighbours merged keeping the larger unreleased, so the peak stays). Bytes
-- are sampled bytes, unbiased estimates of the real ones. Absent from older
-- profiles.
CREATE TABLE IF NOT EXISTS heapscope_memory_series (
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  ts INTEGER NOT NULL,          -- the span's first op (CLOCK_MONOTONIC ns)
  unreleased INTEGER NOT NULL,  -- the span's largest sampled unreleased bytes
  unreleased_end INTEGER NOT NULL, -- ... at the span's end
  allocated INTEGER NOT NULL    -- sampled bytes allocated in all, at the span's end
);

-- The samples behind a range of that series (the flamegraph's selection):
-- sampled allocations with their malloc's span and their free's time, kept
-- by a hash of their sequence number when there are many (at most 16384
-- freed ones a heap, and the live ones the same hash keeps: 32768 rows a
-- heap at most); each row stands for `weight` samples, so weighted sums are
-- unbiased.
CREATE TABLE IF NOT EXISTS heapscope_memory_sample (
  upid INTEGER NOT NULL,
  heap_name TEXT NOT NULL,
  callsite_id INTEGER NOT NULL,
  alloc_ts INTEGER NOT NULL,    -- the start of the series span its malloc fell in
  free_ts INTEGER,              -- its free (its record's arrival at the producer); NULL: not freed
  size INTEGER NOT NULL,        -- sampled bytes
  weight INTEGER NOT NULL       -- samples this row stands for
);
