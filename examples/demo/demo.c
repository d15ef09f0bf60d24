/* A small program with a known heap for `./heapscope.sh demo`: it loads records into an
 * index (the largest holder at the peak), builds a lookup table over them, keeps a cache of
 * rendered lines, uses scratch buffers it frees at once (churn: in alloc_space, not at the
 * peak), frees it all and leaks one buffer (`heapscope leaks`). Build: cc -g demo.c -o demo */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RECORDS = 4000, VALUES = 256, BUCKETS = 1024 };

struct record {
    char *name;
    double *values;
};

struct node {
    struct node *next;
    const struct record *record;
    char key[240]; /* 256 bytes a node */
};

static char *copy_name(int i) {
    char *name = malloc(64);
    snprintf(name, 64, "record-%d", i);
    return name;
}

static double *read_values(int i) {
    double *values = calloc(VALUES, sizeof *values); /* 2 KiB a record */
    for (int v = 0; v < VALUES; v++)
        values[v] = i + v;
    return values;
}

static struct record *parse_record(int i) {
    struct record *r = malloc(sizeof *r);
    r->name = copy_name(i);
    r->values = read_values(i);
    return r;
}

static struct record **load_index(int n) {
    struct record **index = malloc(n * sizeof *index);
    for (int i = 0; i < n; i++)
        index[i] = parse_record(i);
    return index;
}

static struct node **build_lookup(struct record **index, int n) {
    struct node **buckets = calloc(BUCKETS, sizeof *buckets);
    for (int i = 0; i < n; i++) {
        struct node *node = malloc(sizeof *node);
        node->record = index[i];
        snprintf(node->key, sizeof node->key, "%s", index[i]->name);
        node->next = buckets[i % BUCKETS];
        buckets[i % BUCKETS] = node;
    }
    return buckets;
}

static char *format_line(const struct record *r) {
    char *line = malloc(512);
    snprintf(line, 512, "%s: %g .. %g", r->name, r->values[0], r->values[VALUES - 1]);
    return line;
}

static char **render_cache(struct record **index, int n) {
    char **cache = malloc(n * sizeof *cache);
    for (int i = 0; i < n; i++)
        cache[i] = format_line(index[i]);
    return cache;
}

static size_t checksum(int n) {
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *scratch = malloc(4096); /* freed at once: churn only */
        memset(scratch, i & 0xff, 4096);
        sum += scratch[i % 4096];
        free(scratch);
    }
    return sum;
}

int main(void) {
    struct record **index = load_index(RECORDS);
    struct node **lookup = build_lookup(index, RECORDS);
    char **cache = render_cache(index, RECORDS);
    printf("demo: %d records, checksum %zu, %s\n", RECORDS, checksum(RECORDS), cache[RECORDS - 1]);
    for (int b = 0; b < BUCKETS; b++)
        for (struct node *node = lookup[b], *next; node; node = next) {
            next = node->next;
            free(node);
        }
    free(lookup);
    for (int i = 0; i < RECORDS; i++) {
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
