/* client_fp: code built without frame pointers (-O2 -fomit-frame-pointer),
 * where %rbp holds anything, calls malloc. A frame-pointer walk must stop
 * at the first frame it cannot trust, not read through it.
 *
 *   client_fp rbp16 | rbp8   malloc called with %rbp = -16 / -8 (what
 *                            alignment code leaves there)
 *   client_fp signal         a SIGUSR1 handler mallocs and frees while the
 *                            interrupted code has %rbp = -16
 *   client_fp altstack       the same handler on a sigaltstack
 *
 * Ground truth at -i 1: 300 allocations of 4321 bytes, all freed, made
 * directly by bad_rbp_alloc (rbp modes) or by on_signal (signal modes):
 *   alloc_space 1296300, alloc_objects 300, space 0, objects 0
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define COUNT 300
#define SIZE 4321

static volatile long rbp_value;

/* Calls malloc(SIZE) with %rbp = rbp_value, on a 16-aligned stack below
 * the red zone; %rbx keeps the old %rsp. */
__attribute__((noinline)) void *bad_rbp_alloc(void) {
  void *p;
  long v = rbp_value;
  __asm__ volatile(
      "mov %%rsp, %%rbx\n\t"
      "lea -128(%%rsp), %%rsp\n\t"
      "and $-16, %%rsp\n\t"
      "push %%rbp\n\t"
      "push %%rbp\n\t"
      "mov %1, %%rbp\n\t"
      "mov %2, %%edi\n\t"
      "call malloc@PLT\n\t"
      "pop %%rbp\n\t"
      "pop %%rbp\n\t"
      "mov %%rbx, %%rsp\n\t"
      : "=a"(p)
      : "r"(v), "i"(SIZE)
      : "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "memory", "cc",
        "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  return p;
}

static volatile int handled;

__attribute__((noinline)) void on_signal(int sig) {
  (void)sig;
  void *p = malloc(SIZE);
  if (p) {
    memset(p, 1, 16);
    handled++;
  }
  free(p);
}

/* Sends SIGUSR1 to this thread with %rbp = -16 at the moment of delivery
 * (the kernel delivers it on the way out of the syscall). */
__attribute__((noinline)) void signal_with_bad_rbp(void) {
  long pid = getpid(), tid = syscall(SYS_gettid);
  __asm__ volatile(
      "push %%rbp\n\t"
      "mov $-16, %%rbp\n\t"
      "mov %0, %%rdi\n\t"
      "mov %1, %%rsi\n\t"
      "mov %2, %%rdx\n\t"
      "mov %3, %%eax\n\t"
      "syscall\n\t"
      "pop %%rbp\n\t"
      :
      : "r"(pid), "r"(tid), "i"(SIGUSR1), "i"(SYS_tgkill)
      : "rax", "rdi", "rsi", "rdx", "rcx", "r11", "memory", "cc");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: client_fp rbp16|rbp8|signal|altstack\n");
    return 2;
  }
  const char *mode = argv[1];
  if (strcmp(mode, "rbp16") == 0 || strcmp(mode, "rbp8") == 0) {
    rbp_value = strcmp(mode, "rbp16") == 0 ? -16 : -8;
    int ok = 0;
    for (int i = 0; i < COUNT; i++) {
      void *p = bad_rbp_alloc();
      ok += p != NULL;
      free(p);
    }
    printf("%s: %d allocations\n", mode, ok);
    return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  if (strcmp(mode, "altstack") == 0) {
    static char alt[1 << 16];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
      return 3;
    sa.sa_flags = SA_ONSTACK;
  } else if (strcmp(mode, "signal") != 0) {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  sigaction(SIGUSR1, &sa, NULL);
  for (int i = 0; i < COUNT; i++)
    signal_with_bad_rbp();
  printf("%s: %d signals handled\n", mode, handled);
  return 0;
}
