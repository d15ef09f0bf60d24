/* phases.c: a long-running target driven by the test, one command per line on stdin.
 *
 *   a   allocate 1 MiB in 16 blocks of 64 KiB (kept), in grow()
 *   f   free every block kept so far
 *   p   allocate 1 MiB in peak_block() and free it again at once
 *   q   exit 0
 * After each command it prints "ok <cmd> <bytes kept>" on stdout and flushes,
 * so the test knows the phase is done (no sleeps). With `pre N` as argv[1] it
 * first keeps N blocks before printing "ready", for attach tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (64 * 1024)
#define MAX_BLOCKS 4096

static void *blocks[MAX_BLOCKS];
static int nblocks;
static long kept;

__attribute__((noinline)) static void grow(void) {
  for (int i = 0; i < 16 && nblocks < MAX_BLOCKS; i++) {
    blocks[nblocks] = malloc(BLOCK);
    memset(blocks[nblocks], 1, BLOCK);
    nblocks++;
    kept += BLOCK;
  }
}

__attribute__((noinline)) static void pre_attach(int n) {
  for (int i = 0; i < n && nblocks < MAX_BLOCKS; i++) {
    blocks[nblocks] = malloc(BLOCK);
    memset(blocks[nblocks], 2, BLOCK);
    nblocks++;
    kept += BLOCK;
  }
}

__attribute__((noinline)) static void peak_block(void) {
  void *p[16];
  for (int i = 0; i < 16; i++) p[i] = malloc(BLOCK);
  for (int i = 0; i < 16; i++) free(p[i]);
}

static void release(void) {
  for (int i = 0; i < nblocks; i++) free(blocks[i]);
  nblocks = 0;
  kept = 0;
}

int main(int argc, char **argv) {
  /* Static stdio buffers: with -i 1 the profile holds exactly the blocks above. */
  static char inbuf[4096], outbuf[4096];
  setvbuf(stdin, inbuf, _IOFBF, sizeof inbuf);
  setvbuf(stdout, outbuf, _IOLBF, sizeof outbuf);
  if (argc > 2 && strcmp(argv[1], "pre") == 0) pre_attach(atoi(argv[2]));
  printf("ready %ld\n", kept);
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    switch (line[0]) {
      case 'a': grow(); break;
      case 'f': release(); break;
      case 'p': peak_block(); break;
      case 'q': printf("bye %ld\n", kept); return 0;
      default: continue;
    }
    printf("ok %c %ld\n", line[0], kept);
  }
  return 0;
}
