/*
 * labelsplit: labels pushed in one translation unit and popped in another (pop.c), as a
 * program whose request handler pushes and whose framework pops would. Each of ROUNDS
 * requests keeps 1000 bytes under tenant=acme, then, after the pop, 3000 bytes unlabelled.
 * --print-truth: `tenant acme ALLOCATED UNRELEASED`. Built from both files by
 * tests/integration/test_alloc_labels.py (not a one-file program of build.py).
 */
#include <heapscope.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 10

void split_pop(void); /* pop.c */

static void *volatile sink;

__attribute__((noinline)) static void labelled_work(void) { sink = malloc(1000); }

__attribute__((noinline)) static void after_pop(void) { sink = malloc(3000); }

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--print-truth") == 0) {
    printf("tenant acme %d %d\n", ROUNDS * 1000, ROUNDS * 1000);
    return 0;
  }
  for (int i = 0; i < ROUNDS; i++) {
    heapscope_label_push("tenant", "acme");
    labelled_work();
    split_pop();
    after_pop();
  }
  return 0;
}
