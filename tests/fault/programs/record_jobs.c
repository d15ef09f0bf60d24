/* record_jobs.c: a target run in a terminal, for the tests of `heapscope record`'s job
 * control (tests/fault/test_record_terminal.py).
 *
 * It prints "ready pid=P pgid=G ppid=R fg=F" (F: its group is the terminal's foreground), then
 * "got TERM=t HUP=h INT=i CONT=c" each time a count changes (it waits in ppoll with the signals
 * unblocked only there: no sleeps, no lost wake-up). It reads its commands from its stdin, the
 * terminal:
 *   k        kill(0, SIGTERM): a signal to its own process group
 *   p        print "paused" and leave the terminal alone until its next SIGHUP
 *   a        allocate 64 KiB, kept: "ok a BYTES" (BYTES: allocated so far)
 *   t        tcsetattr on the terminal (SIGTTOU unless its group is in the foreground): "tty ok"
 *   e WORD   print "echo WORD"
 *   x N      print "final TERM=t HUP=h INT=i CONT=c", exit with status N
 * EOF on stdin: exit 0. With the argument "die", SIGINT keeps its default action (Ctrl-C kills it).
 */
#define _GNU_SOURCE /* ppoll */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

static volatile sig_atomic_t term, hup, intr, cont;

static void on_signal(int sig) {
  if (sig == SIGTERM) term++;
  else if (sig == SIGHUP) hup++;
  else if (sig == SIGINT) intr++;
  else if (sig == SIGCONT) cont++;
}

static void report(void) {
  printf("TERM=%d HUP=%d INT=%d CONT=%d\n", (int)term, (int)hup, (int)intr, (int)cont);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int die = argc > 1 && strcmp(argv[1], "die") == 0;
  int counted[] = {SIGTERM, SIGHUP, SIGINT, SIGCONT};
  sigset_t mask, open_mask;
  sigemptyset(&mask);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  for (size_t i = 0; i < sizeof counted / sizeof counted[0]; i++) {
    if (die && counted[i] == SIGINT) continue;
    sigaddset(&mask, counted[i]);
    sigaction(counted[i], &sa, NULL);
  }
  sigprocmask(SIG_BLOCK, &mask, &open_mask);
  printf("ready pid=%d pgid=%d ppid=%d fg=%d\n", (int)getpid(), (int)getpgrp(), (int)getppid(),
         tcgetpgrp(0) == getpgrp());
  int seen = 0, paused_at = -1;
  size_t allocated = 0;
  char line[128];
  size_t len = 0;
  for (;;) {
    struct pollfd in = {.fd = 0, .events = POLLIN};
    if (paused_at >= 0 && hup != paused_at) paused_at = -1;
    int n = ppoll(&in, paused_at >= 0 ? 0 : 1, NULL, &open_mask);
    int now = term + hup + intr + cont;
    if (now != seen) {
      seen = now;
      printf("got ");
      report();
    }
    if (n <= 0) continue;
    char c;
    ssize_t r = read(0, &c, 1);
    if (r <= 0) return 0;
    if (c != '\n' && c != '\r') {
      if (len + 1 < sizeof line) line[len++] = c;
      continue;
    }
    line[len] = '\0';
    len = 0;
    if (line[0] == 'a') {
      char *block = malloc(64 * 1024);
      if (block == NULL) return 99;
      memset(block, 1, 64 * 1024);
      allocated += 64 * 1024;
      printf("ok a %zu\n", allocated);
    } else if (line[0] == 'p') {
      paused_at = hup;
      printf("paused\n");
    } else if (line[0] == 'k') {
      kill(0, SIGTERM);
    } else if (line[0] == 't') {
      struct termios t;
      if (tcgetattr(0, &t) == 0 && tcsetattr(0, TCSANOW, &t) == 0) printf("tty ok\n");
      else perror("tcsetattr");
    } else if (line[0] == 'e') {
      printf("echo %s\n", line + 2);
    } else if (line[0] == 'x') {
      printf("final ");
      report();
      return atoi(line + 1);
    }
  }
}
