/* stacks.c: see stacks.h. */
#include "stacks.h"

#include <sys/mman.h>

#include "wire.h"

#define TABLE_BITS 20
#define TABLE_SLOTS (UINT64_C(1) << TABLE_BITS)
#define MAX_PROBES 64

static uint64_t *table;

static uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= UINT64_C(0xd6e8feb86659fd93);
  h ^= h >> 32;
  h *= UINT64_C(0xd6e8feb86659fd93);
  h ^= h >> 32;
  return h;
}

/* One multiplication per frame (rotate, xor, multiply: each step is a
 * bijection of the state for a given pc and of the pc for a given state, so
 * two stacks of one depth that differ in a single frame never collide), and
 * the full mix once at the end. */
uint64_t hs_stack_id(const uint64_t *pcs, uint32_t depth) {
  uint64_t h = UINT64_C(0x6a09e667f3bcc909) ^ depth;
  for (uint32_t i = 0; i < depth; i++)
    h = (((h << 23) | (h >> 41)) ^ pcs[i]) * UINT64_C(0x9e3779b97f4a7c15);
  h = mix(h);
  return h ? h : 1;
}

/* As hs_stack_id, one multiplication per Python frame: the frame's value
 * is its code key (already a hash) plus its (lasti, flags) spread by a
 * multiplication, so two stacks that differ in a single frame still differ
 * in one bijective step. */
uint64_t hs_stack_id_py(uint64_t native, const struct hs_pyframe *py, uint32_t n) {
  uint64_t h = native ^ (UINT64_C(0xbb67ae8584caa73b) + n);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t at = (uint64_t)(uint32_t)py[i].lasti << 8 | py[i].flags;
    uint64_t v = py[i].code_key + at * UINT64_C(0xc2b2ae3d27d4eb4f);
    h = (((h << 23) | (h >> 41)) ^ v) * UINT64_C(0x9e3779b97f4a7c15);
  }
  h = mix(h);
  return h ? h : 1;
}

int hs_stacks_init(void) {
  void *m = mmap(NULL, TABLE_SLOTS * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    return -HS_ERR_OUT_OF_MEMORY;
  __atomic_store_n(&table, (uint64_t *)m, __ATOMIC_RELEASE);
  return HS_OK;
}

enum hs_intern hs_stacks_intern(uint64_t id) {
  uint64_t *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
  if (t == NULL)
    return HS_STACK_FULL;
  uint64_t i = (id >> 7) & (TABLE_SLOTS - 1);
  for (int n = 0; n < MAX_PROBES; n++, i = (i + 1) & (TABLE_SLOTS - 1)) {
    uint64_t v = __atomic_load_n(&t[i], __ATOMIC_RELAXED);
    if (v == id)
      return HS_STACK_KNOWN;
    if (v == 0) {
      if (__atomic_compare_exchange_n(&t[i], &v, id, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return HS_STACK_NEW;
      if (v == id) /* another thread inserted the same id first */
        return HS_STACK_KNOWN;
    }
  }
  return HS_STACK_FULL;
}
