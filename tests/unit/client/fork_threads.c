/* Target for test_client.py: 4 threads allocate while the main thread forks
 * children that allocate and exit without exec. Must neither hang nor crash,
 * with or without profiling. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *churn(void *arg) {
  (void)arg;
  unsigned long n = 0;
  while (!stop) {
    void *p = malloc(16 + n % 4000);
    free(p);
    n++;
  }
  return NULL;
}

int main(void) {
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, churn, NULL);
  int ok = 0;
  for (int f = 0; f < 20; f++) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < 10000; i++)
        free(malloc(32 + i % 1000));
      _exit(7);
    }
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7)
      ok++;
  }
  stop = 1;
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  printf("forks ok %d\n", ok);
  return 0;
}
