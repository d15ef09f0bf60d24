/* mapheaps.c: memory malloc never sees, beside malloc's (docs/mmap-heaps.md).
 *
 * Ground truth at interval 1, `heap HEAP FUNCTION alloc_space alloc_objects
 * space objects` lines (a range cut or moved is booked again: one more
 * allocation of its bytes left):
 *   mmap map_arena     48 MiB mapped, written, kept
 *   mmap trim_aligned  6 MiB mapped, its first and last MiB unmapped: 4 MiB kept
 *   mmap punch_hole    3 MiB mapped, the middle MiB unmapped: 2 x 1 MiB kept
 *   mmap grow_remap    1 MiB mapped, mremap'd (may move) to 3 MiB: the 1 MiB moves
 *                      with its stack, the 2 MiB added are a new allocation
 *   mmap shrink_remap  2 MiB mapped, mremap'd to 1 MiB
 *   mmap temp_map      1 MiB mapped and unmapped
 *   mmap give_back     4 MiB mapped and written; its second MiB given back with
 *                      MADV_DONTNEED (the range freed, its first MiB and last 2 MiB
 *                      booked again), its last MiB with MADV_FREE (the last 2 MiB
 *                      freed, their first booked again), then the second MiB made
 *                      memory again by mprotect (a new allocation) and written:
 *                      3 MiB held of 4 + 1 + 2 + 1 + 1 allocated
 *   brk  grow_brk      16 MiB added by sbrk, written, kept
 *   brk  shrink_brk    2 MiB added by sbrk, 1 MiB given back
 * and, as `truth` lines (libc.malloc):
 *   small_blocks  4096 x 4 KiB kept (glibc's brk heap, not ours)
 *   big_blocks    8 x 2 MiB kept (glibc maps each: in malloc's heap only)
 * Not booked: map_file (a private file mapping; in the mmap heap with
 * --mmap-files, its size then on the `file` line), reserve (8 MiB PROT_NONE).
 *
 * `mapheaps direct`: 4 MiB mapped and unmapped through syscall(SYS_mmap) and
 * syscall(SYS_munmap): two calls said as not seen.
 * `mapheaps threads`: 4 threads each map 2000 x 64 KiB, unmap each one's first
 * page, then the rest but for every 100th (the `threads` line: in churn_maps).
 * `mapheaps serve`: says `ready`, then per line on stdin: `m` maps 32 MiB in
 * late_map (`mapped`), `u` unmaps its last 8 MiB (`unmapped`), `q` quits: a
 * target to attach to. Prints `rss KIB` and
 * `hwm KIB` on stderr at the end either way.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "truth.h"

#define MIB (1024L * 1024L)
#define RW (PROT_READ | PROT_WRITE)
#define ANON (MAP_PRIVATE | MAP_ANONYMOUS)

static void *map(long size) {
  void *p = mmap(NULL, (size_t)size, RW, ANON, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  return p;
}

static void touch(void *p, long size) { memset(p, 0x5a, (size_t)size); }

static void map_arena(void) {
  void *p = map(48 * MIB);
  touch(p, 48 * MIB);
  truth_sink = p;
}

static void trim_aligned(void) {
  char *p = map(6 * MIB);
  munmap(p, 1 * MIB);
  munmap(p + 5 * MIB, 1 * MIB);
  touch(p + MIB, 4 * MIB);
}

static void punch_hole(void) {
  char *p = map(3 * MIB);
  munmap(p + MIB, MIB);
  touch(p, MIB);
  touch(p + 2 * MIB, MIB);
}

static void grow_remap(void) {
  void *p = map(MIB);
  void *q = mremap(p, MIB, 3 * MIB, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) {
    perror("mremap");
    exit(2);
  }
  touch(q, 3 * MIB);
}

static void shrink_remap(void) {
  void *p = map(2 * MIB);
  void *q = mremap(p, 2 * MIB, MIB, 0);
  if (q != p) {
    perror("mremap");
    exit(2);
  }
  touch(q, MIB);
}

static void temp_map(void) {
  void *p = map(MIB);
  touch(p, MIB);
  munmap(p, MIB);
}

static void advise(void *p, long size, int advice) {
  if (madvise(p, (size_t)size, advice) != 0) {
    perror("madvise");
    exit(2);
  }
}

static void give_back(void) {
  char *p = map(4 * MIB);
  touch(p, 4 * MIB);
  advise(p + MIB, MIB, MADV_DONTNEED);
  advise(p + 3 * MIB, MIB, MADV_FREE);
  if (mprotect(p + MIB, MIB, RW) != 0) {
    perror("mprotect");
    exit(2);
  }
  touch(p + MIB, MIB);
}

static void grow_brk(void) {
  void *p = sbrk(16 * MIB);
  if (p == (void *)-1) {
    perror("sbrk");
    exit(2);
  }
  touch(p, 16 * MIB);
}

static void shrink_brk(void) {
  char *p = sbrk(2 * MIB);
  if (p == (void *)-1 || sbrk(0) != p + 2 * MIB) {
    fprintf(stderr, "sbrk: the break moved under us\n");
    exit(2);
  }
  sbrk(-MIB);
  touch(p, MIB);
}

static void small_blocks(void) {
  for (int i = 0; i < 4096; i++) {
    void *b = malloc(4096);
    touch(b, 4096);
    truth_sink = b;
  }
}

static void big_blocks(void) {
  for (int i = 0; i < 8; i++) {
    void *b = malloc(2 * MIB);
    touch(b, 2 * MIB);
    truth_sink = b;
  }
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void map_file(const char *self) {
  int fd = open(self, O_RDONLY);
  long size = file_size(self);
  if (fd < 0 || size <= 0) {
    perror("open");
    exit(2);
  }
  volatile char *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    perror("mmap file");
    exit(2);
  }
  (void)p[0];
  close(fd);
}

static void reserve(void) { truth_sink = mmap(NULL, 8 * MIB, PROT_NONE, ANON | MAP_NORESERVE, -1, 0); }

static void direct(void) {
  long p = syscall(SYS_mmap, 0L, 4 * MIB, (long)RW, (long)ANON, -1L, 0L);
  if (p == -1) {
    perror("syscall mmap");
    exit(2);
  }
  touch((void *)p, 4 * MIB);
  syscall(SYS_munmap, p, 4 * MIB);
}

#define THREADS 4
#define ROUNDS 2000
#define CHUNK (64 * 1024L)

static void *churn_maps(void *arg) {
  long page = sysconf(_SC_PAGESIZE);
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    char *p = map(CHUNK);
    munmap(p, (size_t)page);
    if (i % 100 != 0)
      munmap(p + page, (size_t)(CHUNK - page));
  }
  return NULL;
}

static void threads(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, churn_maps, NULL);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
}

static char *late;

static void late_map(void) {
  late = map(32 * MIB);
  touch(late, 32 * MIB);
}

static void serve(void) {
  char line[16];
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready\n");
  while (fgets(line, sizeof line, stdin) && line[0] != 'q') {
    if (line[0] == 'm') {
      late_map();
      printf("mapped\n");
    } else if (line[0] == 'u') {
      munmap(late + 24 * MIB, 8 * MIB);
      printf("unmapped\n");
    }
  }
}

static void status_line(const char *field, const char *tag) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, field, strlen(field)) == 0)
      fprintf(stderr, "%s %ld\n", tag, strtol(line + strlen(field), NULL, 10));
  }
  if (f)
    fclose(f);
}

static void heap_line(const char *heap, const char *fn, long a, long ao, long s, long so) {
  printf("heap %s %s %ld %ld %ld %ld\n", heap, fn, a, ao, s, so);
}

static long page_up(long n) {
  long page = sysconf(_SC_PAGESIZE);
  return (n + page - 1) / page * page;
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    heap_line("mmap", "map_arena", 48 * MIB, 1, 48 * MIB, 1);
    heap_line("mmap", "trim_aligned", (6 + 5 + 4) * MIB, 3, 4 * MIB, 1);
    heap_line("mmap", "punch_hole", (3 + 1 + 1) * MIB, 3, 2 * MIB, 2);
    heap_line("mmap", "grow_remap", (1 + 1 + 2) * MIB, 3, 3 * MIB, 2);
    heap_line("mmap", "shrink_remap", (2 + 1) * MIB, 2, MIB, 1);
    heap_line("mmap", "temp_map", MIB, 1, 0, 0);
    heap_line("mmap", "give_back", (4 + 1 + 2 + 1 + 1) * MIB, 5, 3 * MIB, 3);
    heap_line("brk", "grow_brk", 16 * MIB, 1, 16 * MIB, 1);
    heap_line("brk", "shrink_brk", (2 + 1) * MIB, 2, MIB, 1);
    truth_line("small_blocks", 4096LL * 4096, 4096, 4096LL * 4096, 4096);
    truth_line("big_blocks", 16 * MIB, 8, 16 * MIB, 8);
    long f = page_up(file_size(argv[0]));
    printf("file map_file %ld %d %ld %d\n", f, 1, f, 1);
    long page = sysconf(_SC_PAGESIZE), kept = THREADS * (ROUNDS / 100);
    printf("threads churn_maps %ld %ld %ld %ld\n", THREADS * ROUNDS * (2 * CHUNK - page), THREADS * ROUNDS * 2L,
           kept * (CHUNK - page), kept);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "direct") == 0) {
    direct();
  } else if (argc > 1 && strcmp(argv[1], "threads") == 0) {
    threads();
  } else if (argc > 1 && strcmp(argv[1], "serve") == 0) {
    serve();
    return 0;
  } else {
    grow_brk(); /* first: nothing else moved the break since */
    shrink_brk();
    map_arena();
    trim_aligned();
    punch_hole();
    grow_remap();
    shrink_remap();
    temp_map();
    give_back();
    small_blocks();
    big_blocks();
    map_file(argv[0]);
    reserve();
  }
  status_line("VmRSS:", "rss");
  status_line("VmHWM:", "hwm");
  return 0;
}
