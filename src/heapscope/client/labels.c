/*
 * labels.c: allocation labels (labels.h, docs/labels.md). Exported, for
 * include/heapscope.h and heapscope.label (labels.py, through _labels.c):
 *
 *   heapscope_label_push_v1(key, value) -> 0, or -1 (not profiled, bad
 *                           key or value, too deep: a level is pushed anyway)
 *   heapscope_label_pop_v1()
 *   heapscope_label_python_v1(get_tstate, is_initialized, offset) -> 0 or
 *                           -1: where a thread's current Python context is
 *   heapscope_label_bind_v1(ctx, pairs, len, count) -> the context bound
 *                           or unbound (0: none, or not profiled); ctx 0:
 *                           the calling thread's current context
 *
 * Sets. Interned in one process-wide open-addressed table of
 * HS_MAX_LABEL_SETS slots (a set's id is its slot + 1, stable across
 * sessions); a slot is claimed with a CAS and filled before it is marked
 * ready. When the table is full every new set is HS_LABEL_SET_OVERFLOW,
 * which the producer counts (docs/labels.md). Each set's LABELSET record is
 * sent once per session: when it is made, and again by the first sample of
 * a later session (an attach) or after a dropped write.
 *
 * Python contexts. The Python side binds a context object's address to a
 * set id (heapscope_label_bind_v1, called with the GIL held, so binds never
 * race each other) in a 4-way set-associative table; a sample reads its
 * thread's PyThreadState.context (at the offset heapscope._labels, built for
 * that Python, gives heapscope_label_python_v1: no pointer of unknown kind is
 * followed here) and looks it up. A reader without the GIL may race a bind of the
 * same slot: it then takes a wrong set for one sample, never a crash (the
 * table holds integers only).
 */
#include "labels.h"

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>

#include "ring.h"
#include "state.h"
#include "wire.h"

int hs_labels_used;

struct label_set {
  uint64_t hash;
  uint32_t state;    /* 0 empty, 1 being filled, 2 ready */
  uint32_t sent_gen; /* the session (hs_session.gen) that has its record; 0: none */
  uint32_t count;
  uint32_t len;
  char text[HS_LABEL_TEXT_MAX];
};

static struct label_set sets[HS_MAX_LABEL_SETS];

/* The C stack: each level's set; levels past LABEL_DEPTH are counted, not kept. */
#define LABEL_DEPTH 16u
static HS_TLS uint32_t stack_ids[LABEL_DEPTH];
static HS_TLS uint32_t stack_depth;

#define CTX_BUCKETS 1024u
#define CTX_WAYS 4u
struct ctx_entry {
  uintptr_t ctx; /* a PyContext's address; 0 = free */
  uint32_t id;
  uint32_t pad_;
};
static struct ctx_entry ctx_table[CTX_BUCKETS][CTX_WAYS];
static uint32_t ctx_used; /* entries bound; samples skip the lookup while 0 */
typedef void *(*tstate_fn)(void);
typedef int (*initialized_fn)(void);
static tstate_fn get_tstate;          /* PyGILState_GetThisThreadState */
static initialized_fn is_initialized; /* Py_IsInitialized: no thread state is read after the end */
static uint32_t ctx_offset; /* of PyThreadState.context; 0 = not known */

static uint64_t text_hash(const char *s, uint32_t len) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* The set with this text (key NUL value NUL ..., sorted by key): its id,
 * made on first sight; HS_LABEL_SET_OVERFLOW when the table is full. */
static uint32_t intern(const char *text, uint32_t len, uint32_t count) {
  uint64_t h = text_hash(text, len);
  uint32_t i = (uint32_t)(h % HS_MAX_LABEL_SETS);
  for (uint32_t n = 0; n < HS_MAX_LABEL_SETS; n++, i = (i + 1) % HS_MAX_LABEL_SETS) {
    struct label_set *s = &sets[i];
    uint32_t st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    if (st == 0) {
      uint32_t empty = 0;
      if (__atomic_compare_exchange_n(&s->state, &empty, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        s->hash = h;
        s->count = count;
        s->len = len;
        memcpy(s->text, text, len);
        __atomic_store_n(&s->state, 2, __ATOMIC_RELEASE);
        return i + 1;
      }
      st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    }
    /* Another thread is filling it: a bounded wait (past it the set may be
     * made twice, under two ids, which the producer reads as one). */
    for (int spin = 0; st == 1 && spin < 1000; spin++) {
      sched_yield();
      st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    }
    if (st == 2 && s->hash == h && s->len == len && memcmp(s->text, text, len) == 0)
      return i + 1;
  }
  return HS_LABEL_SET_OVERFLOW;
}

/* Sends set id's record if this session has not had it. Inside the session
 * (hs_session_enter) and under the guard. */
static void send_set(uint32_t id) {
  if (id == 0 || id > HS_MAX_LABEL_SETS)
    return;
  struct label_set *s = &sets[id - 1];
  uint32_t gen = hs_session.gen;
  if (__atomic_load_n(&s->sent_gen, __ATOMIC_RELAXED) == gen ||
      __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != 2)
    return;
  struct hs_labelset rec = {id, s->count, s->len, 0};
  int rc = hs_ring_write(&hs_session.ring, HS_REC_LABELSET, &rec, sizeof rec, s->text, s->len, 0);
  if (hs_ok(rc) && rc == HS_OK)
    __atomic_store_n(&s->sent_gen, gen, __ATOMIC_RELAXED);
}

static int key_ok(const char *k, size_t *len) {
  if (k == NULL)
    return 0;
  size_t n = 0;
  for (; k[n] != '\0'; n++) {
    char c = k[n];
    if (n >= HS_LABEL_KEY_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                   (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
      return 0;
  }
  *len = n;
  return n > 0;
}

static int value_ok(const char *v, size_t *len) {
  if (v == NULL)
    return 0;
  size_t n = strnlen(v, HS_LABEL_VALUE_MAX + 1);
  *len = n;
  return n <= HS_LABEL_VALUE_MAX;
}

static int put(char *out, uint32_t *len, const char *s, size_t n) {
  if (*len + n + 1 > HS_LABEL_TEXT_MAX)
    return -1;
  memcpy(out + *len, s, n);
  out[*len + n] = '\0';
  *len += (uint32_t)n + 1;
  return 0;
}

/* The set of `parent` with key = value (replacing the key's value): its id,
 * HS_LABEL_SET_OVERFLOW when too long or the table is full. */
static uint32_t with_pair(uint32_t parent, const char *key, size_t klen, const char *val, size_t vlen) {
  if (parent == HS_LABEL_SET_OVERFLOW)
    return parent;
  char out[HS_LABEL_TEXT_MAX];
  uint32_t len = 0, count = 0;
  const char *p = "", *end = p;
  if (parent != 0 && parent <= HS_MAX_LABEL_SETS) {
    p = sets[parent - 1].text;
    end = p + sets[parent - 1].len;
  }
  int placed = 0, bad = 0;
  while (p < end) {
    const char *k = p;
    size_t kl = strnlen(k, (size_t)(end - k));
    const char *v = k + kl + 1;
    size_t vl = strnlen(v, (size_t)(end - v));
    p = v + vl + 1;
    int c = memcmp(k, key, kl < klen ? kl : klen);
    if (c == 0)
      c = (kl > klen) - (kl < klen);
    if (!placed && c >= 0) {
      bad |= put(out, &len, key, klen) | put(out, &len, val, vlen);
      count++;
      placed = 1;
      if (c == 0)
        continue;
    }
    bad |= put(out, &len, k, kl) | put(out, &len, v, vl);
    count++;
  }
  if (!placed) {
    bad |= put(out, &len, key, klen) | put(out, &len, val, vlen);
    count++;
  }
  return bad ? HS_LABEL_SET_OVERFLOW : intern(out, len, count);
}

/* ---- the push's memo ----
 * A server pushes the same few pairs (string constants, mostly) over and over: the set a
 * push makes is remembered by (parent set, key pointer, value pointer), so that a repeated
 * push costs a lookup and a compare of its two strings, not the making and interning of
 * the set. Process-wide (no TLS: glibc keeps little static TLS for a library an attach
 * dlopen()s). Each slot is under a sequence count (odd: being written): a reader that sees
 * it change, or odd, misses. A hit is checked against the strings' bytes now, NUL
 * included, so that a buffer reused for another value (snprintf into the same array)
 * misses rather than giving the old set: their first 8 bytes against the words the slot
 * keeps (one load and compare each: labels are mostly that short), the bytes past them
 * against set id's text, where the pair is at `off`. */
#define MEMO_SLOTS 1024u
struct push_memo {
  uint32_t seq;
  uint32_t parent;
  uint32_t id;
  uint16_t off;  /* of the key in set id's text (< HS_LABEL_TEXT_MAX) */
  uint8_t klen;  /* <= HS_LABEL_KEY_MAX */
  uint8_t vlen;  /* <= HS_LABEL_VALUE_MAX */
  const char *key;
  const char *value;
  uint64_t khead; /* the key's first min(klen + 1, 8) bytes, NUL included; zeros past them */
  uint64_t vhead; /* the value's, as khead */
  uint64_t kmask; /* head_mask(klen + 1): which bytes of a word khead holds */
  uint64_t vmask; /* head_mask(vlen + 1) */
}; /* 64 bytes, aligned: a push reads one cache line of the memo */
static struct push_memo memo[MEMO_SLOTS] __attribute__((aligned(64)));

static inline struct push_memo *memo_slot(uint32_t parent, const char *key, const char *value) {
  uint64_t h = (uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)value * 0xc2b2ae3d27d4eb4full ^
               (uint64_t)parent * 0x165667b19e3779f9ull;
  return &memo[(h ^ (h >> 29)) & (MEMO_SLOTS - 1)];
}

/* The mask of a string's first min(n, 8) bytes in a little-endian word. */
static inline uint64_t head_mask(uint32_t n) { return n >= 8 ? ~UINT64_C(0) : (UINT64_C(1) << (8 * n)) - 1; }

/* The word a slot keeps of a string of n bytes (NUL included), read at keep time. */
static uint64_t head_of(const char *s, uint32_t n) {
  uint64_t w = 0;
  memcpy(&w, s, n < 8 ? n : 8);
  return w;
}

/* same_head near the end of a page: out of line, so that the common path keeps its
 * registers free. */
__attribute__((noinline)) static int same_head_bytes(const char *s, uint64_t head, uint64_t mask) {
  const unsigned char *h = (const unsigned char *)&head;
  for (uint32_t i = 0; i < 8 && ((mask >> (8 * i)) & 0xff) != 0; i++)
    if ((unsigned char)s[i] != h[i])
      return 0;
  return 1;
}

/* Do the first min(n, 8) bytes of s read as head (mask: head_mask(n), n the string's bytes
 * with its NUL)? One word when s's 8 bytes lie in one page (the page of its first byte,
 * which is readable): bytes past its NUL may then be read, never a page the program did
 * not map. Else byte by byte, never past the first byte that differs (head's NUL is at
 * n - 1 when n <= 8, so a string that matches is not read past its NUL). */
static inline int same_head(const char *s, uint64_t head, uint64_t mask) {
  if (HS_LIKELY(((uintptr_t)s & 4095u) <= 4096u - 8u)) {
    uint64_t a;
    memcpy(&a, s, 8);
    return ((a ^ head) & mask) == 0;
  }
  return same_head_bytes(s, head, mask);
}

/* Do the bytes of s from the 9th on read as t's (n bytes in all, the NUL the last; s's
 * first 8 matched, so none of them is its NUL)? Byte by byte: rare (labels over 7 bytes). */
static int same_tail(const char *s, const char *t, uint32_t n) {
  for (uint32_t i = 8; i < n; i++)
    if (s[i] != t[i])
      return 0;
  return 1;
}

/* Do key's and value's bytes past their heads read as the pair at off in set id's text
 * (ready and immutable once memo_keep saw it)? Out of line: labels over 7 bytes. */
__attribute__((noinline)) static int same_tails(uint32_t id, uint32_t off, const char *key, uint32_t klen,
                                                const char *value, uint32_t vlen) {
  const struct label_set *set = &sets[id - 1];
  return __atomic_load_n(&set->state, __ATOMIC_ACQUIRE) == 2 && off + klen + vlen + 2 <= set->len &&
         same_tail(key, set->text + off, klen + 1) && same_tail(value, set->text + off + klen + 1, vlen + 1);
}

/* The memo's set for this push, 0 when it has none. The slot's fields are compared as they
 * are read (a torn read only makes a compare fail, or is caught by the sequence count
 * before a hit is returned): fewer values live at once, no spills. */
static inline uint32_t memo_find(uint32_t parent, const char *key, const char *value) {
  struct push_memo *m = memo_slot(parent, key, value);
  uint32_t s1 = __atomic_load_n(&m->seq, __ATOMIC_ACQUIRE);
  if ((s1 & 1) || __atomic_load_n(&m->key, __ATOMIC_RELAXED) != key ||
      __atomic_load_n(&m->value, __ATOMIC_RELAXED) != value || __atomic_load_n(&m->parent, __ATOMIC_RELAXED) != parent ||
      !same_head(key, __atomic_load_n(&m->khead, __ATOMIC_RELAXED), __atomic_load_n(&m->kmask, __ATOMIC_RELAXED)) ||
      !same_head(value, __atomic_load_n(&m->vhead, __ATOMIC_RELAXED), __atomic_load_n(&m->vmask, __ATOMIC_RELAXED)))
    return 0;
  uint32_t id = __atomic_load_n(&m->id, __ATOMIC_RELAXED), klen = __atomic_load_n(&m->klen, __ATOMIC_RELAXED);
  uint32_t vlen = __atomic_load_n(&m->vlen, __ATOMIC_RELAXED), off = __atomic_load_n(&m->off, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&m->seq, __ATOMIC_RELAXED) != s1 || id == 0 || id > HS_MAX_LABEL_SETS)
    return 0;
  if (HS_UNLIKELY(klen >= 8 || vlen >= 8) && !same_tails(id, off, key, klen, value, vlen))
    return 0;
  return id;
}

static void memo_keep(uint32_t parent, const char *key, size_t klen, const char *value, size_t vlen, uint32_t id) {
  if (id == 0 || id > HS_MAX_LABEL_SETS)
    return;
  const struct label_set *s = &sets[id - 1];
  uint32_t off = 0;
  while (off < s->len && !(strnlen(s->text + off, s->len - off) == klen && memcmp(s->text + off, key, klen) == 0)) {
    off += (uint32_t)strnlen(s->text + off, s->len - off) + 1;                /* the key */
    off += off < s->len ? (uint32_t)strnlen(s->text + off, s->len - off) + 1 : 0; /* its value */
  }
  if (off >= s->len)
    return;
  struct push_memo *m = memo_slot(parent, key, value);
  uint32_t s0 = __atomic_load_n(&m->seq, __ATOMIC_RELAXED);
  if ((s0 & 1) || !__atomic_compare_exchange_n(&m->seq, &s0, s0 + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return; /* another thread writes it: let it */
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&m->parent, parent, __ATOMIC_RELAXED);
  __atomic_store_n(&m->id, id, __ATOMIC_RELAXED);
  __atomic_store_n(&m->off, (uint16_t)off, __ATOMIC_RELAXED);
  __atomic_store_n(&m->klen, (uint8_t)klen, __ATOMIC_RELAXED);
  __atomic_store_n(&m->vlen, (uint8_t)vlen, __ATOMIC_RELAXED);
  __atomic_store_n(&m->key, key, __ATOMIC_RELAXED);
  __atomic_store_n(&m->value, value, __ATOMIC_RELAXED);
  __atomic_store_n(&m->khead, head_of(key, (uint32_t)klen + 1), __ATOMIC_RELAXED);
  __atomic_store_n(&m->vhead, head_of(value, (uint32_t)vlen + 1), __ATOMIC_RELAXED);
  __atomic_store_n(&m->kmask, head_mask((uint32_t)klen + 1), __ATOMIC_RELAXED);
  __atomic_store_n(&m->vmask, head_mask((uint32_t)vlen + 1), __ATOMIC_RELAXED);
  __atomic_store_n(&m->seq, s0 + 2, __ATOMIC_RELEASE);
}

static inline uint32_t c_current(void) {
  uint32_t d = stack_depth;
  return d == 0 ? 0 : stack_ids[(d <= LABEL_DEPTH ? d : LABEL_DEPTH) - 1];
}

/* A push the memo could not answer: the set made (or found) and sent. Its id in *id
 * (parent when the key or value is bad: -1). Out of line, so that the memo's path saves no
 * registers for it. */
__attribute__((noinline)) static int push_slow(uint32_t parent, const char *key, const char *value, uint32_t *id) {
  size_t klen, vlen;
  if (!key_ok(key, &klen) || !value_ok(value, &vlen)) {
    *id = parent;
    return -1;
  }
  struct hs_thread *t = &hs_thread_state;
  int saved_errno = errno;
  int was = hs_guard_enter(t); /* the ring wait may allocate */
  *id = with_pair(parent, key, klen, value, vlen);
  memo_keep(parent, key, klen, value, vlen, *id);
  __atomic_store_n(&hs_labels_used, 1, __ATOMIC_RELAXED);
  if (hs_session_enter()) {
    send_set(*id);
    hs_session_leave();
  }
  hs_guard_leave(t, was);
  errno = saved_errno;
  return 0;
}

/* A push the common path did not take: not applied, or the memo missed, or the set is
 * not sent to this session yet. */
__attribute__((noinline)) static int push_full(const char *key, const char *value) {
  uint32_t parent = c_current(), id = parent;
  int rc = -1;
  if (stack_depth >= LABEL_DEPTH || !__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE) ||
      hs_guard_held(&hs_thread_state) || key == NULL || value == NULL) {
    /* not applied: a level all the same, so that pushes and pops stay paired */
  } else { /* the memo missed, or its set is not sent to this session yet */
    rc = push_slow(parent, key, value, &id);
  }
  if (stack_depth < LABEL_DEPTH)
    stack_ids[stack_depth] = id;
  stack_depth++;
  return rc;
}

/* The common push: one made before, its set sent to this session. No call on this path
 * (everything else is push_full's, a tail call), so it saves no registers. */
HS_EXPORT int heapscope_label_push_v1(const char *key, const char *value) {
  uint32_t d = stack_depth, id;
  if (HS_LIKELY(d < LABEL_DEPTH && __atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE) &&
                !hs_guard_held(&hs_thread_state) && key != NULL && value != NULL) &&
      (id = memo_find(d == 0 ? 0 : stack_ids[d - 1], key, value)) != 0 &&
      __atomic_load_n(&sets[id - 1].sent_gen, __ATOMIC_RELAXED) == hs_session.gen) {
    stack_ids[d] = id;
    stack_depth = d + 1;
    return 0;
  }
  return push_full(key, value);
}

HS_EXPORT void heapscope_label_pop_v1(void) {
  if (stack_depth > 0)
    stack_depth--;
}

HS_EXPORT int heapscope_label_python_v1(void *tstate_getter, void *initialized, uint32_t offset) {
  if (tstate_getter == NULL || initialized == NULL || offset == 0 || offset % 8 != 0 || offset > 4096)
    return -1;
  memcpy(&get_tstate, &tstate_getter, sizeof get_tstate);
  memcpy(&is_initialized, &initialized, sizeof is_initialized);
  __atomic_store_n(&ctx_offset, offset, __ATOMIC_RELEASE);
  return 0;
}

static struct ctx_entry *ctx_bucket(uintptr_t ctx) {
  uint64_t h = (uint64_t)ctx * 0x9e3779b97f4a7c15ull;
  return ctx_table[h >> 54]; /* 10 bits: CTX_BUCKETS */
}

/* Python's side holds the GIL: binds are serialised. */
static uint32_t bind(uintptr_t ctx, uint32_t id) {
  struct ctx_entry *b = ctx_bucket(ctx), *free_slot = NULL;
  for (uint32_t w = 0; w < CTX_WAYS; w++) {
    if (b[w].ctx == ctx) {
      if (id == 0) {
        __atomic_store_n(&b[w].ctx, 0, __ATOMIC_RELEASE);
        __atomic_fetch_sub(&ctx_used, 1, __ATOMIC_RELAXED);
      } else {
        __atomic_store_n(&b[w].id, id, __ATOMIC_RELEASE);
      }
      return id;
    }
    if (b[w].ctx == 0 && free_slot == NULL)
      free_slot = &b[w];
  }
  if (id == 0)
    return 0;
  if (free_slot == NULL)
    return 0; /* the bucket is full: this context's samples go unlabelled */
  __atomic_store_n(&free_slot->id, id, __ATOMIC_RELAXED);
  __atomic_store_n(&free_slot->ctx, ctx, __ATOMIC_RELEASE);
  __atomic_fetch_add(&ctx_used, 1, __ATOMIC_RELAXED);
  return id;
}

/* The calling thread's current Python context (it holds the GIL: the pointer is stable). */
static uintptr_t current_context(void) {
  uint32_t off = __atomic_load_n(&ctx_offset, __ATOMIC_ACQUIRE);
  uintptr_t ts = off != 0 ? (uintptr_t)get_tstate() : 0;
  return ts != 0 ? *(uintptr_t *)(ts + off) : 0;
}

HS_EXPORT uintptr_t heapscope_label_bind_v1(uintptr_t ctx, const char *pairs, uint32_t len, uint32_t count) {
  if (!__atomic_load_n(&hs_enabled, __ATOMIC_ACQUIRE))
    return 0;
  if (ctx == 0 && (ctx = current_context()) == 0)
    return 0;
  if (len == 0) {
    bind(ctx, 0);
    return ctx;
  }
  if (pairs == NULL || len > HS_LABEL_TEXT_MAX || pairs[len - 1] != '\0')
    return 0;
  struct hs_thread *t = &hs_thread_state;
  if (hs_guard_held(t))
    return 0;
  int saved_errno = errno;
  int was = hs_guard_enter(t);
  uint32_t id = intern(pairs, len, count);
  __atomic_store_n(&hs_labels_used, 1, __ATOMIC_RELAXED);
  if (hs_session_enter()) {
    send_set(id);
    hs_session_leave();
  }
  hs_guard_leave(t, was);
  errno = saved_errno;
  return bind(ctx, id) != 0 ? ctx : 0;
}

/* The set bound to this thread's current Python context, 0 if none. */
static uint32_t python_current(void) {
  uint32_t off = __atomic_load_n(&ctx_offset, __ATOMIC_ACQUIRE);
  if (off == 0 || __atomic_load_n(&ctx_used, __ATOMIC_RELAXED) == 0 || !is_initialized())
    return 0;
  uintptr_t ts = (uintptr_t)get_tstate();
  if (ts == 0)
    return 0;
  uintptr_t ctx = __atomic_load_n((uintptr_t *)(ts + off), __ATOMIC_RELAXED);
  if (ctx == 0)
    return 0;
  struct ctx_entry *b = ctx_bucket(ctx);
  for (uint32_t w = 0; w < CTX_WAYS; w++) {
    if (__atomic_load_n(&b[w].ctx, __ATOMIC_ACQUIRE) == ctx)
      return __atomic_load_n(&b[w].id, __ATOMIC_ACQUIRE);
  }
  return 0;
}

uint32_t hs_labels_sample_slow(void) {
  uint32_t id = python_current();
  if (id == 0)
    id = c_current();
  send_set(id);
  return id;
}
