/* record_driven.c: a target driven one command per line on stdin, for the
 * fault tests of `heapscope record` (tests/fault/test_record_faults.py).
 *
 *   a        keep 64 KiB more (in keep_block), print "ok a <bytes kept>"
 *   x N      exit with status N
 *   kill     raise SIGKILL          segv   write through a null pointer
 *   abort    abort()
 * It prints "ready <pid>" first; every answer is flushed at once, so the
 * test waits on lines, never on time. EOF on stdin: exit 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (64 * 1024)

void *kept[4096]; /* global: the compiler must keep every store */
static int nkept;

__attribute__((noinline)) static void keep_block(void) {
  if (nkept < 4096) {
    kept[nkept] = malloc(BLOCK);
    memset(kept[nkept], 1, BLOCK);
    nkept++;
  }
}

int main(void) {
  static char inbuf[4096], outbuf[4096];
  setvbuf(stdin, inbuf, _IOFBF, sizeof inbuf);
  setvbuf(stdout, outbuf, _IOLBF, sizeof outbuf);
  printf("ready %d\n", (int)getpid());
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "abort", 5) == 0) {
      abort();
    } else if (line[0] == 'a') {
      keep_block();
      printf("ok a %ld\n", (long)nkept * BLOCK);
    } else if (line[0] == 'x') {
      exit(atoi(line + 1));
    } else if (strncmp(line, "kill", 4) == 0) {
      raise(SIGKILL);
    } else if (strncmp(line, "segv", 4) == 0) {
      volatile int *p = NULL;
      *p = 1;
    }
  }
  return 0;
}
