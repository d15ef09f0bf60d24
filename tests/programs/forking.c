/* forking: fork() in a multithreaded process while another thread is busy in
 * malloc/free; the child allocates and leaves with _exit; the parent waits for it,
 * then goes on allocating.
 *
 * Threads: `spin_alloc` mallocs and frees 24 bytes in a loop until the parent has
 * reaped the child (so a fork can land while it is inside the allocator);
 * `thread_keep` allocates, then blocks on a pipe until after the fork, then
 * allocates again in `thread_after`.
 *
 * Ground truth for the PARENT process (views at exit, -1 = not fixed):
 *   path                               alloc_space  alloc_objects  space  objects
 *   main > parent_before                     6400          100      6400     100
 *   thread_main > thread_keep               32000         1000     32000    1000
 *   main > parent_after                      4800          300      4800     300
 *   thread_main > thread_after              12800           50     12800      50
 *   spin_main > spin_alloc                     -1           -1         0       0
 * For the CHILD (pid != parent; profiled or not, never booked to the parent):
 *   main > child_alloc                      25600          200     25600     200
 * stdout: "child exited 0\nparent pid P child pid C\n" from the parent (so a test can
 * tell the two processes apart in the profile). Exit status 0.
 * `--print-truth` prints these lines (child_alloc last) and exits without allocating.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "truth.h"

static void *parent_blocks[400];
static void *thread_blocks[1050];
static atomic_int stop_spinning;
static int gate[2];       /* main -> keeper thread: "the fork is done" */
static int keeper_ready[2]; /* keeper thread -> main: "first batch is allocated" */

static void spin_alloc(void) {
  while (!atomic_load(&stop_spinning)) {
    void *p = malloc(24);
    truth_sink = p;
    free(p);
  }
}
static void *spin_main(void *arg) {
  (void)arg;
  spin_alloc();
  return NULL;
}

static void thread_keep(void) {
  for (int i = 0; i < 1000; i++) thread_blocks[i] = malloc(32);
}
static void thread_after(void) {
  for (int i = 0; i < 50; i++) thread_blocks[1000 + i] = malloc(256);
}
static void *thread_main(void *arg) {
  (void)arg;
  char c;
  thread_keep();
  if (write(keeper_ready[1], "r", 1) != 1) abort();
  if (read(gate[0], &c, 1) != 1) abort();
  thread_after();
  return NULL;
}

static void parent_before(void) {
  for (int i = 0; i < 100; i++) parent_blocks[i] = malloc(64);
}
static void parent_after(void) {
  for (int i = 0; i < 300; i++) parent_blocks[100 + i] = malloc(16);
}
static void child_alloc(void) {
  static void *child_blocks[200];
  for (int i = 0; i < 200; i++) child_blocks[i] = malloc(128);
  truth_sink = child_blocks;
}

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("parent_before", 6400, 100, 6400, 100);
    truth_line("thread_keep", 32000, 1000, 32000, 1000);
    truth_line("parent_after", 4800, 300, 4800, 300);
    truth_line("thread_after", 12800, 50, 12800, 50);
    truth_line("spin_alloc", -1, -1, 0, 0);
    truth_line("child_alloc", 25600, 200, 25600, 200);
    return 0;
  }
  if (pipe(gate) != 0 || pipe(keeper_ready) != 0) abort();
  pthread_t spinner, keeper;
  if (pthread_create(&spinner, NULL, spin_main, NULL) != 0) abort();
  if (pthread_create(&keeper, NULL, thread_main, NULL) != 0) abort();
  char c;
  if (read(keeper_ready[0], &c, 1) != 1) abort();
  parent_before();

  pid_t pid = fork();
  if (pid < 0) abort();
  if (pid == 0) {
    child_alloc();
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) abort();
  atomic_store(&stop_spinning, 1);
  pthread_join(spinner, NULL);

  parent_after();
  if (write(gate[1], "g", 1) != 1) abort();
  pthread_join(keeper, NULL);
  printf("child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  printf("parent pid %d child pid %d\n", (int)getpid(), (int)pid);
  return 0;
}
