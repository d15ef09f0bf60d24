/* cxx: C++ new/delete and new[]/delete[], for exact checks at sampling interval 1.
 *
 * The leaf frame of these callsites is `operator new(unsigned long)` (libstdc++
 * calls malloc from it; its `operator new[]` is a bare tail jump to `operator new`,
 * so it leaves no frame); the leaf's parent is the user function below. Widget is 5 x 8 = 40 bytes; int[256] is 1024 bytes (no array
 * cookie for a trivially destructible type).
 *
 * Ground truth (views at exit):
 *   path                              alloc_space  alloc_objects  space  objects
 *   main > make_widgets > new             4000           100       4000     100
 *       100 x new Widget, kept
 *   main > make_arrays > new[]           10240            10       5120       5
 *       10 x new int[256], 5 deleted with delete[]
 *   main > churn_widgets > new            2000            50          0       0
 *       50 x new Widget, each deleted right away
 * `--print-truth` prints these lines and exits without allocating.
 */
#include "truth.h"

struct Widget {
  long a, b, c, d, e;
};

static const int kWidgets = 100;
static const int kArrays = 10;
static const int kArrayLen = 256;
static const int kArraysDeleted = 5;
static const int kChurn = 50;

static Widget *widgets[kWidgets];
static int *arrays[kArrays];

__attribute__((noinline)) void make_widgets() {
  for (int i = 0; i < kWidgets; i++) widgets[i] = new Widget();
}

__attribute__((noinline)) void make_arrays() {
  for (int i = 0; i < kArrays; i++) arrays[i] = new int[kArrayLen];
  for (int i = 0; i < kArraysDeleted; i++) delete[] arrays[i];
}

__attribute__((noinline)) void churn_widgets() {
  for (int i = 0; i < kChurn; i++) {
    Widget *w = new Widget();
    truth_sink = w;
    delete w;
  }
}

static_assert(sizeof(Widget) == 40, "Widget is 40 bytes");

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    const long long arr = kArrayLen * (long long)sizeof(int);
    truth_line("make_widgets", kWidgets * 40, kWidgets, kWidgets * 40, kWidgets);
    truth_line("make_arrays", kArrays * arr, kArrays, (kArrays - kArraysDeleted) * arr,
               kArrays - kArraysDeleted);
    truth_line("churn_widgets", kChurn * 40, kChurn, 0, 0);
    return 0;
  }
  make_widgets();
  make_arrays();
  churn_widgets();
  return 0;
}
