/*
 * The `heapscope` command: a few C instructions before the Python that runs it.
 *
 * `record` handles SIGUSR1 (a dump) and passes SIGTERM, SIGHUP, SIGUSR2 and SIGALRM on to its
 * target, but Python needs ~20-40 ms to start and import before its handlers exist, and a
 * signal then would end `record` at its default action before the target even starts. So
 * the command blocks them first thing and execs the interpreter it was built for; a blocked
 * signal stays pending, and heapscope.sigmask lets it through once the handlers exist (or at
 * once, for the commands that install none). SIGINT is blocked only until the Python code
 * begins, which turns a Ctrl-C during the interpreter's start into exit status 130 instead of
 * a traceback. HEAPSCOPE_LAUNCHER_HELD tells heapscope.sigmask which of them were blocked
 * here (not by whoever started `heapscope`); it takes the variable out of the environment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher_config.h" /* HEAPSCOPE_PYTHON: the interpreter meson built heapscope for */

/* heapscope.sigmask.HELD, then SIGINT (tests/unit/cli/test_launcher.py compares them). */
static const int held[] = {SIGUSR1, SIGTERM, SIGHUP, SIGUSR2, SIGALRM, SIGINT};

/* One line, as `ps` shows it. The first entry of sys.path (the working directory, for -c) goes
 * first, so that no file there can stand in for a module heapscope imports; sys.argv becomes
 * [heapscope's argv[0], its arguments...], as a console script has it. */
static const char code[] =
    "import sys; '' in sys.path[:1] and sys.path.pop(0); del sys.argv[0]; "
    "from heapscope.cli.start import run; run()";

/* The interpreter beside this executable (a virtual environment's bin/), when the one heapscope
 * was built with is gone (a wheel built in one environment and installed in another). */
static int beside_self(char *out, size_t size, const char *name) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return -1;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash == NULL)
    return -1;
  *slash = '\0';
  int w = snprintf(out, size, "%s/%s", self, name);
  return w > 0 && (size_t)w < size && access(out, X_OK) == 0 ? 0 : -1;
}

#if defined(__x86_64__) && defined(HEAPSCOPE_ENTRY)
/* The executable's entry point (meson links it static, with -e hs_entry): the kernel starts
 * the program here, with no dynamic loader before it, and the first instruction blocks the
 * signals; then glibc's _start, with the registers the kernel gave (rdx: the exit hook). */
#define SIGBIT(s) (1UL << ((s) - 1))
const unsigned long hs_entry_mask =
    SIGBIT(SIGUSR1) | SIGBIT(SIGTERM) | SIGBIT(SIGHUP) | SIGBIT(SIGUSR2) | SIGBIT(SIGALRM) | SIGBIT(SIGINT);
unsigned long hs_entry_before; /* the mask the program was started with */
__asm__(".text\n"
        ".globl hs_entry\n"
        ".type hs_entry, @function\n"
        "hs_entry:\n"
        "  mov %rdx, %r12\n"
        "  mov $14, %eax\n" /* rt_sigprocmask(SIG_BLOCK, &hs_entry_mask, &hs_entry_before, 8) */
        "  xor %edi, %edi\n"
        "  lea hs_entry_mask(%rip), %rsi\n"
        "  lea hs_entry_before(%rip), %rdx\n"
        "  mov $8, %r10d\n"
        "  syscall\n"
        "  mov %r12, %rdx\n"
        "  jmp _start\n");
#define WAS_BLOCKED(before, s) ((hs_entry_before & SIGBIT(s)) != 0)
#else
#define WAS_BLOCKED(before, s) sigismember(&(before), (s))
#endif

int main(int argc, char **argv) {
  sigset_t want, before;
  sigemptyset(&want);
  for (size_t i = 0; i < sizeof held / sizeof *held; i++)
    sigaddset(&want, held[i]);
  sigprocmask(SIG_BLOCK, &want, &before);
  char added[64] = ""; /* the ones blocked here (at the entry point too), not by our parent */
  size_t len = 0;
  for (size_t i = 0; i < sizeof held / sizeof *held; i++)
    if (!WAS_BLOCKED(before, held[i])) {
      sigdelset(&before, held[i]);
      len += (size_t)snprintf(added + len, sizeof added - len, "%s%d", len ? "," : "", held[i]);
    }
  if (setenv("HEAPSCOPE_LAUNCHER_HELD", added, 1) != 0) {
    sigprocmask(SIG_SETMASK, &before, NULL);  /* heapscope.sigmask could not tell: held by nobody */
  }

  char **args = calloc((size_t)argc + 4, sizeof *args);
  if (args == NULL) {
    fputs("heapscope: out of memory\n", stderr);
    return 127;
  }
  args[1] = "-c";
  args[2] = (char *)code;
  for (int i = 0; i < argc; i++)
    args[3 + i] = argv[i];

  static char beside[PATH_MAX];
  const char *tried[] = {HEAPSCOPE_PYTHON, NULL};
  if (beside_self(beside, sizeof beside, "python3") == 0)
    tried[1] = beside;
  int err = 0;
  for (size_t i = 0; i < 2; i++) {
    if (tried[i] == NULL)
      continue;
    args[0] = (char *)tried[i];
    execv(tried[i], args);
    if (i == 0)
      err = errno;
  }
  sigprocmask(SIG_SETMASK, &before, NULL);
  fprintf(stderr, "heapscope: cannot run the Python it was installed for, %s (%s); `python3 -m heapscope` runs it "
                  "with another\n", HEAPSCOPE_PYTHON, strerror(err));
  return 127;
}
