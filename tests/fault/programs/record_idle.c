/* record_idle.c: prints "ready <pid>", then waits for a line on stdin and
 * exits 0. Built static (attach must refuse it) and linked with -ljemalloc
 * (attach must refuse a foreign allocator) by tests/fault/test_record_faults.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  char *p = malloc(100);
  strcpy(p, "x");
  printf("ready %d\n", (int)getpid());
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 0;
  free(p);
  return 0;
}
