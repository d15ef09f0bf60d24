/* unwmemo.c: see unwmemo.h. */
#include "unwmemo.h"

#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfa.h"
#include "unwind.h"
#include "wire.h"

#define MEMO_FRAMES (HS_MAX_FRAMES + HS_UNWIND_SLACK)

/* A thread's last complete walk, leaf first: frame i has return address
 * pc, stack pointer sp (strictly increasing along the walk) and rbp bp;
 * k8 is where the step that reached frame i restored rbp from (its CFA is
 * this frame's sp; 0: rbp unchanged). 32 bytes a frame: one frame's words
 * are read together. */
struct mframe {
  uint64_t pc, sp, bp, k8;
};

struct memo {
  uint32_t n; /* frames; 0: none kept */
  unsigned long long subs; /* the loader's unload count it was taken under */
  struct mframe f[MEMO_FRAMES];
};

static struct memo pool[HS_UNWMEMO_THREADS];
static uint32_t pool_used;
/* This thread's memo; (struct memo *)1: none left for it. */
static HS_TLS struct memo *mine;

int hs_unwmemo_mode;

/* The loader's unload count, as last seen by any thread. */
static unsigned long long subs_seen;

/* Counted with plain relaxed loads and stores, not read-modify-writes (a
 * locked add on every sample would cost more than some walks): a count may
 * lose an increment when two threads race; they are for tests and the
 * verify summary only. */
static struct {
  uint64_t walks, hits, frames_reused, fell_back, frames_walked;
  uint64_t compared, same, differ;
} counts;

static inline __attribute__((always_inline)) void count(uint64_t *c, uint64_t v) {
  __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

static int note_subs(struct dl_phdr_info *info, size_t size, void *data) {
  (void)data;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
    __atomic_store_n(&subs_seen, info->dlpi_subs, __ATOMIC_RELAXED);
  return 1;
}

void hs_unwmemo_init(int cfa_in_use) {
  hs_unwmemo_mode = 0;
  if (!cfa_in_use)
    return;
  const char *on = secure_getenv("HEAPSCOPE_UNWIND_MEMO");
  const char *check = secure_getenv("HEAPSCOPE_UNWIND_MEMO_VERIFY");
  int verify = check && check[0] == '1' && check[1] == '\0';
  if (!verify && !(on && on[0] == '1' && on[1] == '\0'))
    return; /* off by default: see unwmemo.h for why */
  dl_iterate_phdr(note_subs, NULL);
  hs_unwmemo_mode = verify ? 2 : 1;
}

static __attribute__((noinline)) struct memo *claim(void) {
  uint32_t i = __atomic_fetch_add(&pool_used, 1, __ATOMIC_RELAXED);
  mine = i < HS_UNWMEMO_THREADS ? &pool[i] : (struct memo *)1;
  return mine;
}

/* Every 256th walk of a thread (as cfa.c's check_unloads): a memo taken
 * before an unload may hold frames of code that is gone. */
static __attribute__((noinline)) void check_subs(struct memo *m) {
  dl_iterate_phdr(note_subs, NULL);
  if (m->subs != __atomic_load_n(&subs_seen, __ATOMIC_RELAXED))
    m->n = 0;
}

/* The walk of cfa.c's hs_cfa_backtrace (the same checks, in the same
 * order), with the memo looked at before each step. */
int hs_unwmemo_backtrace(uint64_t *buf, uint32_t want) {
  struct hs_thread *t = &hs_thread_state;
  struct memo *m = mine;
  if (HS_UNLIKELY(m == NULL))
    m = claim();
  if (m == (struct memo *)1 || !t->stack_known || want == 0 || want > MEMO_FRAMES)
    return -1;
  if (HS_UNLIKELY((t->unwinds & 255) == 1))
    check_subs(m);
  uintptr_t lo = t->stack_lo, hi = t->stack_hi;
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
  if (fp < lo || hi - lo < 16 || fp > hi - 16 || (fp & 7))
    return -1;
  const uintptr_t *frame = (const uintptr_t *)fp;
  uintptr_t pc = frame[1], bp = frame[0], sp = fp + 16, k8 = 0;
  struct mframe own[MEMO_FRAMES]; /* this walk's own frames, to keep */
  struct mframe *kf = m->f;
  uint32_t n = 0, j = 0, kept = m->n;
  count(&counts.walks, 1);
  for (;;) {
    while (j < kept && kf[j].sp < sp)
      j++;
    if (j < kept && kf[j].sp == sp && kf[j].pc == pc && kf[j].bp == bp) {
      /* From here the walk reads what the kept one read: the return
       * address at each frame's sp - 8 and a saved rbp at sp - k8, all at
       * or above this frame's sp, on the live stack. Each is read again;
       * when all are unchanged, the rest of the stack is the kept one's. Up
       * to `want` frames: the walk would stop there too. */
      uint32_t last = kept - j <= want - n ? kept : j + (want - n);
      uint64_t *out = buf + n - j;
      uint32_t i = j + 1;
      out[j] = pc;
      for (; i < last; i++) {
        const struct mframe *f = &kf[i];
        if (*(const uint64_t *)(f->sp - 8) != f->pc)
          break;
        if (f->k8 && *(const uint64_t *)(f->sp - f->k8) != f->bp)
          break;
        out[i] = f->pc;
      }
      if (i == last) {
        count(&counts.hits, 1);
        count(&counts.frames_reused, last - j);
        count(&counts.frames_walked, n);
        if (last == kept && n + (kept - j) <= MEMO_FRAMES) {
          /* Keep this walk: its own frames, then the kept ones. */
          if (n != j)
            memmove(kf + n, kf + j, (kept - j) * sizeof *kf);
          for (uint32_t k = 0; k < n; k++)
            kf[k] = own[k];
          kf[n].k8 = k8;
          m->n = n + (kept - j);
        }
        return (int)(n + (last - j));
      }
      /* Frame i changed: no kept frame below it can match any more. */
      j = i;
    }
    buf[n] = pc;
    own[n] = (struct mframe){pc, sp, bp, k8};
    n++;
    if (n == want)
      return (int)n; /* cut: not kept */
    struct hs_cfa_step st;
    hs_cfa_step_of(pc, &st);
    uintptr_t cfa;
    k8 = st.k8;
    switch (st.kind) {
    case HS_CFA_STEP_RSP:
      cfa = sp + st.off;
      if (HS_UNLIKELY(cfa > hi))
        goto fell_back;
      break;
    case HS_CFA_STEP_RBP:
      cfa = bp + st.off;
      if (cfa < sp + 8 || cfa > hi || (cfa & 7) || cfa - sp < k8)
        goto fell_back;
      break;
    case HS_CFA_STEP_END:
      /* A complete walk: kept for the next samples. */
      for (uint32_t k = 0; k < n; k++)
        kf[k] = own[k];
      m->subs = __atomic_load_n(&subs_seen, __ATOMIC_RELAXED);
      m->n = n;
      return (int)n;
    default:
      goto fell_back;
    }
    if (k8)
      bp = *(const uintptr_t *)(cfa - k8);
    pc = *(const uintptr_t *)(cfa - 8);
    sp = cfa;
    if (HS_UNLIKELY(pc == 0))
      goto fell_back;
  }
fell_back:
  count(&counts.fell_back, 1);
  return -1;
}

void hs_unwmemo_stats(struct hs_unwmemo_stats *out) {
  out->walks = __atomic_load_n(&counts.walks, __ATOMIC_RELAXED);
  out->hits = __atomic_load_n(&counts.hits, __ATOMIC_RELAXED);
  out->frames_reused = __atomic_load_n(&counts.frames_reused, __ATOMIC_RELAXED);
  out->fell_back = __atomic_load_n(&counts.fell_back, __ATOMIC_RELAXED);
}

/* ---- HEAPSCOPE_UNWIND_MEMO_VERIFY=1 ---- */

static void put(char **p, char *end, const char *s) {
  while (*s && *p < end)
    *(*p)++ = *s++;
}

static void put_num(char **p, char *end, uint64_t v, unsigned base) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  if (base == 16)
    put(p, end, "0x");
  while (n > 0 && *p < end)
    *(*p)++ = tmp[--n];
}

static void put_stack(char **p, char *end, const char *who, const uint64_t *pcs, uint32_t n) {
  put(p, end, who);
  put_num(p, end, n, 10);
  put(p, end, ":");
  for (uint32_t i = 0; i < n; i++) {
    put(p, end, " ");
    put_num(p, end, pcs[i], 16);
  }
  put(p, end, "\n");
}

/* Both walks from this one frame (so the same frames of ours on top, which
 * the trim strips): the plain one's answer goes to buf. */
int hs_unwmemo_verify(uint64_t *buf, uint32_t want) {
  uint64_t ours[MEMO_FRAMES];
  if (want > MEMO_FRAMES)
    want = MEMO_FRAMES;
  int k = hs_unwmemo_backtrace(ours, want);
  int r = hs_cfa_backtrace(buf, want);
  if (k < 0 || r < 0)
    return r;
  count(&counts.compared, 1);
  uint32_t max = want - HS_UNWIND_SLACK, f1, f2;
  int t1, t2;
  uint32_t d1 = hs_unwind_trim(ours, (uint32_t)k, max, &t1, &f1);
  uint32_t d2 = hs_unwind_trim(buf, (uint32_t)r, max, &t2, &f2);
  if (d1 == d2 && t1 == t2 && memcmp(ours + f1, buf + f2, d1 * sizeof(uint64_t)) == 0) {
    count(&counts.same, 1);
    return r;
  }
  uint64_t differ = __atomic_load_n(&counts.differ, __ATOMIC_RELAXED);
  count(&counts.differ, 1);
  if (differ < 3) {
    char line[8192], *p = line, *end = line + sizeof line - 1;
    put(&p, end, "heapscope: unwind memo verify: differ\n");
    put_stack(&p, end, "  memo ", ours + f1, d1);
    put_stack(&p, end, "  walk ", buf + f2, d2);
    (void)!write(2, line, (size_t)(p - line));
  }
  return r;
}

__attribute__((destructor)) static void memo_verify_at_exit(void) {
  if (hs_unwmemo_mode != 2)
    return;
  char line[256], *p = line, *end = line + sizeof line - 1;
  put(&p, end, "heapscope: unwind memo verify: compared ");
  put_num(&p, end, __atomic_load_n(&counts.compared, __ATOMIC_RELAXED), 10);
  put(&p, end, " same ");
  put_num(&p, end, __atomic_load_n(&counts.same, __ATOMIC_RELAXED), 10);
  put(&p, end, " differ ");
  put_num(&p, end, __atomic_load_n(&counts.differ, __ATOMIC_RELAXED), 10);
  put(&p, end, " hits ");
  put_num(&p, end, __atomic_load_n(&counts.hits, __ATOMIC_RELAXED), 10);
  put(&p, end, " reused ");
  put_num(&p, end, __atomic_load_n(&counts.frames_reused, __ATOMIC_RELAXED), 10);
  put(&p, end, " fell_back ");
  put_num(&p, end, __atomic_load_n(&counts.fell_back, __ATOMIC_RELAXED), 10);
  put(&p, end, " walked ");
  put_num(&p, end, __atomic_load_n(&counts.frames_walked, __ATOMIC_RELAXED), 10);
  put(&p, end, "\n");
  (void)!write(2, line, (size_t)(p - line));
}
