/* tiny: four functions with exactly one allocation call site each, so that the
 * seed's example query (one row per leaf callsite) gives one row per function.
 * Also used as the exec'd child of `spawn`.
 *
 * Ground truth (views at exit; the leaf frame of each row is the function itself):
 *   path                    alloc_space  alloc_objects  space   objects
 *   main > tiny_keep            10000           10      10000       10
 *       10 x malloc(1000), kept
 *   main > tiny_free             6000           20          0        0
 *       20 x malloc(300), all freed
 *   main > tiny_half            10000            4       5000        2
 *       4 x malloc(2500), 2 freed
 *   main > tiny_big            100000            1     100000        1
 *       1 x malloc(100000), kept
 * `--print-truth` prints these lines and exits without allocating.
 */
#include <stdlib.h>

#include "truth.h"

static void *blocks[32];

static void tiny_keep(void) {
  for (int i = 0; i < 10; i++) blocks[i] = malloc(1000);
}

static void tiny_free(void) {
  for (int i = 0; i < 20; i++) {
    void *p = malloc(300);
    truth_sink = p;
    free(p);
  }
}

static void tiny_half(void) {
  void *p[4];
  for (int i = 0; i < 4; i++) p[i] = malloc(2500);
  free(p[0]);
  free(p[2]);
  blocks[10] = p[1];
  blocks[11] = p[3];
}

static void tiny_big(void) { blocks[12] = malloc(100000); }

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("tiny_keep", 10000, 10, 10000, 10);
    truth_line("tiny_free", 6000, 20, 0, 0);
    truth_line("tiny_half", 10000, 4, 5000, 2);
    truth_line("tiny_big", 100000, 1, 100000, 1);
    return 0;
  }
  tiny_keep();
  tiny_free();
  tiny_half();
  tiny_big();
  return 0;
}
