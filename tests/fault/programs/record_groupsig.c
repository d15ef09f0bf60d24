/* record_groupsig.c: a target that counts the signals it gets and never touches the terminal,
 * for the tests of `heapscope record` sharing its process group (a pipeline, make,
 * /usr/bin/time) and of `heapscope live` (tests/fault/test_record_terminal_shared.py).
 *
 * Usage: record_groupsig COMMANDS OUT. It reads its commands from the FIFO COMMANDS and writes
 * its lines to OUT (a FIFO the test reads): "ready pid=P pgid=G", then "got TERM=t INT=i HUP=h
 * USR2=u CONT=c" each time a count changes (it waits in ppoll with the signals unblocked only
 * there: no sleeps, no lost wake-up). Commands:
 *   k        kill(0, SIGTERM): a signal to its own process group
 *   h        kill(0, SIGHUP): the same with SIGHUP
 *   x N      write "final TERM=t INT=i HUP=h USR2=u CONT=c", exit with status N
 * It holds COMMANDS open for writing too (Linux's O_RDWR on a FIFO): its open waits for no
 * writer and it never reads EOF; a test that leaves it running kills its group.
 */
#define _GNU_SOURCE /* ppoll */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t term, intr, hup, usr2, cont;

static void on_signal(int sig) {
  if (sig == SIGTERM) term++;
  else if (sig == SIGINT) intr++;
  else if (sig == SIGHUP) hup++;
  else if (sig == SIGUSR2) usr2++;
  else if (sig == SIGCONT) cont++;
}

static void report(FILE *out, const char *what) {
  fprintf(out, "%s TERM=%d INT=%d HUP=%d USR2=%d CONT=%d\n", what, (int)term, (int)intr, (int)hup,
          (int)usr2, (int)cont);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: record_groupsig COMMANDS OUT\n");
    return 2;
  }
  int counted[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR2, SIGCONT};
  sigset_t mask, open_mask;
  sigemptyset(&mask);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  for (size_t i = 0; i < sizeof counted / sizeof counted[0]; i++) {
    sigaddset(&mask, counted[i]);
    sigaction(counted[i], &sa, NULL);
  }
  sigprocmask(SIG_BLOCK, &mask, &open_mask);
  int in = open(argv[1], O_RDWR);
  FILE *out = fopen(argv[2], "w");
  if (in < 0 || out == NULL) {
    perror("record_groupsig: open");
    return 2;
  }
  setvbuf(out, NULL, _IOLBF, 0);
  fprintf(out, "ready pid=%d pgid=%d\n", (int)getpid(), (int)getpgrp());
  int seen = 0;
  char line[64];
  size_t len = 0;
  for (;;) {
    struct pollfd p = {.fd = in, .events = POLLIN};
    int n = ppoll(&p, 1, NULL, &open_mask);
    int now = term + intr + hup + usr2 + cont;
    if (now != seen) {
      seen = now;
      report(out, "got");
    }
    if (n <= 0) continue;
    char c;
    ssize_t r = read(in, &c, 1);
    if (r <= 0) continue;
    if (c != '\n') {
      if (len + 1 < sizeof line) line[len++] = c;
      continue;
    }
    line[len] = '\0';
    len = 0;
    if (line[0] == 'k') {
      kill(0, SIGTERM);
    } else if (line[0] == 'h') {
      kill(0, SIGHUP);
    } else if (line[0] == 'x') {
      report(out, "final");
      return atoi(line + 1);
    }
  }
}
