/* record_sigcount.c: a target that counts the signals it gets, for the tests of
 * `heapscope record`'s signal passing (tests/fault/test_record_faults.py).
 *
 * It prints "ready <pid> <pgid>", then "got HUP=h TERM=t INT=i" each time a count changes
 * (it waits in ppoll with the signals unblocked only there: no sleeps, no lost wake-up).
 *   g        kill(0, SIGHUP): a signal to its own process group
 *   x N      print "final HUP=h TERM=t INT=i", exit with status N
 * EOF on stdin: exit 0.
 */
#define _GNU_SOURCE /* ppoll */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t hup, term, intr;

static void on_signal(int sig) {
  if (sig == SIGHUP) hup++;
  else if (sig == SIGTERM) term++;
  else if (sig == SIGINT) intr++;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  sigset_t counted, open_mask;
  sigemptyset(&counted);
  sigaddset(&counted, SIGHUP);
  sigaddset(&counted, SIGTERM);
  sigaddset(&counted, SIGINT);
  sigprocmask(SIG_BLOCK, &counted, &open_mask);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  printf("ready %d %d\n", (int)getpid(), (int)getpgrp());
  int seen_hup = 0, seen_term = 0, seen_intr = 0;
  char line[64];
  size_t len = 0;
  for (;;) {
    struct pollfd in = {.fd = 0, .events = POLLIN};
    int n = ppoll(&in, 1, NULL, &open_mask);
    if (hup != seen_hup || term != seen_term || intr != seen_intr) {
      seen_hup = hup, seen_term = term, seen_intr = intr;
      printf("got HUP=%d TERM=%d INT=%d\n", seen_hup, seen_term, seen_intr);
    }
    if (n <= 0) continue;
    char c;
    ssize_t r = read(0, &c, 1);
    if (r <= 0) return 0;
    if (c != '\n') {
      if (len + 1 < sizeof line) line[len++] = c;
      continue;
    }
    line[len] = '\0';
    len = 0;
    if (line[0] == 'g') {
      kill(0, SIGHUP);
    } else if (line[0] == 'x') {
      printf("final HUP=%d TERM=%d INT=%d\n", (int)hup, (int)term, (int)intr);
      return atoi(line + 1);
    }
  }
}
