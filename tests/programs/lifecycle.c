/* lifecycle: how a target ends, and what it prints on the way.
 *
 * Usage: lifecycle MODE
 *   exit3   exit status 3
 *   sigterm killed by SIGTERM (a shell reports 143)
 *   segv    dies of SIGSEGV from a null write (139); no core file is written
 *   sigkill kills itself with SIGKILL (137)
 *   io      copies stdin to stdout between markers, writes binary bytes (NUL, 0xff,
 *           no final newline) to stdout and two lines to stderr, mixing stdio and
 *           write(2); exit status 0
 *   heldsock _exits 0 (no destructor runs) leaving a child made by the fork system
 *           call itself (no atfork handler runs: the child keeps every descriptor,
 *           heapscope's socket too), its stdout and stderr on /dev/null, that waits
 *           for EOF on stdin and _exits
 *   heldkill the same child, then killed by SIGKILL (137)
 * Every mode first runs `before_end` and then writes "about to MODE\n" to stdout
 * with write(2) (so the line is out before any crash).
 *
 * Ground truth (views at the end, whatever the mode):
 *   path                      alloc_space  alloc_objects  space   objects
 *   main > before_end             64000           64      64000       64
 *       64 x malloc(1000), kept
 * `--print-truth` prints it and exits without allocating.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "truth.h"

static void *blocks[64];

static void before_end(void) {
  for (int i = 0; i < 64; i++) blocks[i] = malloc(1000);
}

static void say(const char *s) {
  size_t n = strlen(s);
  if (write(1, s, n) != (ssize_t)n) abort();
}

static void copy_io(void) {
  char buf[4096];
  ssize_t n;
  printf("stdin begins\n");
  fflush(stdout);
  while ((n = read(0, buf, sizeof buf)) > 0)
    if (write(1, buf, (size_t)n) != n) abort();
  printf("stdin ends\n");
  fflush(stdout);
  static const char binary[] = {'b', 'i', 'n', 0, (char)0xff, '\r', '\n', 'x'};
  if (write(1, binary, sizeof binary) != (ssize_t)sizeof binary) abort();
  fprintf(stderr, "to stderr: line one\n");
  if (write(2, "to stderr: line two\n", 20) != 20) abort();
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("before_end", 64000, 64, 64000, 64);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: lifecycle exit3|sigterm|segv|sigkill|io|heldsock|heldkill\n");
    return 2;
  }
  const char *mode = argv[1];
  before_end();
  say("about to ");
  say(mode);
  say("\n");
  if (strcmp(mode, "exit3") == 0) exit(3);
  if (strcmp(mode, "sigterm") == 0) raise(SIGTERM);
  if (strcmp(mode, "segv") == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    *(volatile int *)truth_sink = 1; /* truth_sink is NULL here */
  }
  if (strcmp(mode, "sigkill") == 0) raise(SIGKILL);
  if (strcmp(mode, "io") == 0) {
    copy_io();
    return 0;
  }
  if (strcmp(mode, "heldsock") == 0 || strcmp(mode, "heldkill") == 0) {
    long child = syscall(SYS_fork);
    if (child < 0) abort();
    if (child == 0) {
      int null = open("/dev/null", O_WRONLY);
      if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(1);
      char c;
      while (read(0, &c, 1) > 0) {
      }
      _exit(0);
    }
    if (strcmp(mode, "heldkill") == 0) raise(SIGKILL);
    _exit(0);
  }
  return 2;
}
