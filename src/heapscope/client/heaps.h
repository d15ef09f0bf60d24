/*
 * heaps.h: custom heaps (issue 16), the client side of the public API in
 * include/heapscope.h. The exported functions are declared there (as
 * pointers the program looks up); this header holds what client.c lends
 * heaps.c, nothing else.
 */
#ifndef HEAPSCOPE_CLIENT_HEAPS_H
#define HEAPSCOPE_CLIENT_HEAPS_H

#include <stdint.h>

#include "common.h"
#include "ring.h"

/* The session's ring, interval, seed and frame limit (valid once hs_enabled
 * was seen set, with acquire order). */
HS_HIDDEN struct hs_ring *hs_client_ring(void);
HS_HIDDEN uint64_t hs_client_interval(void);
HS_HIDDEN uint64_t hs_client_seed(void);
HS_HIDDEN uint32_t hs_client_max_frames(void);
/* Turns the client off for good (a negative status from a ring write). */
HS_HIDDEN void hs_client_fail(int status);

#endif
