/* labelsplit's pop, in a translation unit of its own (main.c). */
#include <heapscope.h>

void split_pop(void);

void split_pop(void) { heapscope_label_pop(); }
