/*
 * launch_traced STEPS SIGNAL PROGRAM [ARGS...]: runs PROGRAM, stopped by ptrace at its exec,
 * lets it execute STEPS instructions of its new image, sends it SIGNAL and lets it go. Exits
 * with PROGRAM's status as a shell gives it (128 + the signal that ended it); 125 when the
 * tracing failed. A signal sent at any moment of a program's start is then sent at an exact one.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 4)
    return 125;
  long steps = atol(argv[1]);
  int sig = atoi(argv[2]);
  pid_t pid = fork();
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, NULL, NULL);
    execv(argv[3], argv + 3);
    _exit(127);
  }
  int st;
  /* The exec's SIGTRAP: the new image is loaded, none of its instructions has run. */
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st))
    return 125;
  for (long i = 0; i < steps; i++)
    if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL) != 0 || waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st))
      return 125;
  kill(pid, sig);
  ptrace(PTRACE_DETACH, pid, NULL, NULL);
  if (waitpid(pid, &st, 0) != pid)
    return 125;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
