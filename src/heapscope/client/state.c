/* state.c: see state.h. */
#include "state.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "wire.h"

HS_TLS struct hs_thread hs_thread_state;
int hs_enabled;
size_t hs_page_size = 4096;
struct hs_session hs_session;
struct hs_user_slot hs_session_users[HS_USER_SLOTS];
struct hs_seq_line hs_malloc_seq = {1, {0}};
struct hs_seq_line hs_py_seq = {1, {0}};

/* ---- debug output (never stdio, never allocates) ---- */

void hs_debug(const char *msg, uint64_t value) {
  if (!hs_session.debug)
    return;
  int saved_errno = errno; /* the free path leaves errno to us (record.c, record_free_slow) */
  char line[160];
  size_t n = 0;
  static const char prefix[] = "heapscope: ";
  memcpy(line, prefix, sizeof prefix - 1);
  n = sizeof prefix - 1;
  size_t m = strnlen(msg, 100);
  memcpy(line + n, msg, m);
  n += m;
  if (value != UINT64_MAX) {
    char digits[24];
    int d = 0;
    do {
      digits[d++] = (char)('0' + value % 10);
      value /= 10;
    } while (value);
    line[n++] = ' ';
    while (d)
      line[n++] = digits[--d];
  }
  line[n++] = '\n';
  ssize_t w = write(2, line, n);
  (void)w;
  errno = saved_errno;
}

/* ---- disabling ---- */

void hs_disable(int error) {
  if (!__atomic_exchange_n(&hs_enabled, 0, __ATOMIC_RELAXED))
    return; /* already off (another thread got there first) */
  struct hs_ring_meta *m = hs_session.ring.meta;
  __atomic_store_n(&m->client_error, (uint32_t)error, __ATOMIC_RELAXED);
  __atomic_store_n(&m->client_state, HS_CLIENT_DISABLED, __ATOMIC_RELEASE);
  hs_debug("client disabled, error", (uint64_t)error);
}

/* ---- this thread's stack ---- */

/* Exported by ld.so: the stack pointer at process start, i.e. just above
 * every frame of the main thread. */
extern void *__libc_stack_end;

static pthread_t main_thread;
static int have_main_thread;

void hs_thread_note_main(void) {
  main_thread = pthread_self();
  have_main_thread = 1;
}

/* The top of the current thread's stack, exclusive, when its bounds are
 * unknown. Main thread: glibc's __libc_stack_end. Other threads: glibc
 * places its struct pthread (the thread control block) at the top of the
 * thread's stack mapping, right above the frames. */
static uintptr_t stack_top(void) {
  pthread_t self = pthread_self();
  if (have_main_thread && pthread_equal(self, main_thread))
    return (uintptr_t)__libc_stack_end;
  return (uintptr_t)self;
}

/* Found once per thread with pthread_getattr_np (it allocates, and reads
 * /proc/self/maps on the main thread: we are under the guard, in the slow
 * path). When it fails the walk keeps the old bound, from its own frame to
 * stack_top(). */
void hs_thread_stack_bounds(struct hs_thread *t) {
  pthread_attr_t attr;
  void *addr = NULL;
  size_t size = 0;
  uintptr_t lo = 0, hi = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size > 0) {
      lo = (uintptr_t)addr;
      hi = lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  if (hi <= lo) {
    lo = (uintptr_t)__builtin_frame_address(0);
    hi = stack_top();
  }
  t->stack_lo = lo;
  t->stack_hi = hi > lo ? hi : lo;
  t->stack_known = 1;
}
