/* usdt_target: allocates until SIGUSR1, for a tracer to attach to meanwhile
 * (test_usdt.py). Each turn mallocs 64 bytes, or BIG bytes (at least the
 * test's interval, so always sampled) every 50th turn, and frees the block
 * allocated LIVE turns earlier: every sampled block is freed while the
 * tracer watches. Prints "ready PID" once its loop is about to run; exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define LIVE 256
#define BIG 10000

static volatile sig_atomic_t stop;

static void on_usr1(int sig) {
  (void)sig;
  stop = 1;
}

int main(void) {
  static void *live[LIVE];
  signal(SIGUSR1, on_usr1);
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  for (unsigned long i = 0; !stop; i++) {
    unsigned slot = (unsigned)(i % LIVE);
    free(live[slot]);
    live[slot] = malloc(i % 50 == 0 ? BIG : 64);
    if (!live[slot])
      return 1;
    if (i % 64 == 0)
      usleep(200); /* a steady trickle of samples, not a flood for the producer */
  }
  for (unsigned i = 0; i < LIVE; i++)
    free(live[i]);
  return 0;
}
