/* client_ring: fills the ring while the test holds the producer stopped
 * (SIGSTOP), so that the client's wait for space must end by itself.
 *
 *   client_ring wait       allocates until done; the producer is alive
 *                          (its socket open) but reads nothing
 *   client_ring closefrom  first closes every descriptor from 3 up
 *                          (close_range), the client's socket with them
 *
 * It prints "ready", waits for one line on stdin (the test stops the
 * producer first), then makes 20000 allocations of 100 bytes in
 * ring_fill(), freed at once, and prints "done". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static __attribute__((noinline)) void ring_fill(void) {
  for (int i = 0; i < 20000; i++)
    free(malloc(100));
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  printf("ready\n");
  fflush(stdout);
  char line[16];
  if (!fgets(line, sizeof line, stdin))
    return 3;
  if (strcmp(argv[1], "closefrom") == 0)
    syscall(SYS_close_range, 3u, ~0u, 0u);
  ring_fill();
  printf("done\n");
  fflush(stdout);
  return 0;
}
