/* A small program with a known heap for `./heapscope.sh demo`: it loads records into an
 * index (the largest holder at the peak), keeps a cache of rendered lines, uses scratch
 * buffers it frees at once (churn: in alloc_space, not at the peak), frees the index and
 * leaks one buffer (`heapscope leaks`). Build: cc -g -O1 demo.c -o demo */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct record {
    char *name;
    double *values;
};

static struct record *parse_record(int i) {
    struct record *r = malloc(sizeof *r);
    r->name = malloc(64);
    snprintf(r->name, 64, "record-%d", i);
    r->values = calloc(256, sizeof *r->values); /* 2 KiB a record */
    return r;
}

static struct record **load_index(int n) {
    struct record **index = malloc(n * sizeof *index);
    for (int i = 0; i < n; i++)
        index[i] = parse_record(i);
    return index;
}

static char **render_cache(struct record **index, int n) {
    char **cache = malloc(n * sizeof *cache);
    for (int i = 0; i < n; i++) {
        cache[i] = malloc(512);
        snprintf(cache[i], 512, "%s: %g", index[i]->name, index[i]->values[0]);
    }
    return cache;
}

static size_t checksum(struct record **index, int n) {
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        char *scratch = malloc(4096); /* freed at once: churn only */
        memset(scratch, i & 0xff, 4096);
        sum += (unsigned char)scratch[i % 4096];
        free(scratch);
    }
    (void)index;
    return sum;
}

int main(void) {
    enum { N = 4000 };
    struct record **index = load_index(N);
    char **cache = render_cache(index, N);
    size_t sum = checksum(index, N);
    printf("demo: %d records, checksum %zu\n", N, sum);
    for (int i = 0; i < N; i++) {
        free(index[i]->values);
        free(index[i]->name);
        free(index[i]);
        free(cache[i]);
    }
    free(index);
    free(cache);
    char *leaked = malloc(100000); /* never freed: `heapscope leaks` shows it */
    leaked[0] = 1;
    return 0;
}
