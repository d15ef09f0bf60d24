/*
 * probes.h: the otel_memory USDT probes (SystemTap SDT notes), so that a
 * tracer outside the process (the OpenTelemetry eBPF profiler's memory
 * profiling, gdb, bpftrace) sees the samples heapscope takes, as the
 * contract of the eBPF profiler's design doc "Memory Profiling" asks:
 *
 *   otel_memory:alloc(ptr, size, weight)  a sampled allocation, after the
 *       allocator returned it: the pointer the program gets, the bytes it
 *       asked for, and the bytes it stands for in an unbiased estimate (the
 *       sampler's sample size, sampler.h: k * interval for an allocation
 *       smaller than the interval, its size from the interval up)
 *   otel_memory:free(ptr)  the free of an address of which alloc fired,
 *       before the allocator takes it back
 *
 * Both fire where a sample is booked (record.c): alloc when its record is in
 * heapscope's ring, free when its address leaves the set of sampled
 * addresses (addrset.h), for libc.malloc and python.pymalloc (disjoint, so
 * a consumer keyed by address sees each sampled block once); custom heaps
 * (heaps.c) never fire, their memory being malloc blocks as well.
 *
 * Each probe is gated by its semaphore, a 16-bit counter in the section
 * .probes that a tracer increments while it is attached (its address is in
 * the probe's note): with nothing attached a probe costs a sample one load
 * and one branch, and an unsampled malloc or free nothing at all. The
 * probe itself is out of line (probes.c), where its arguments are the
 * function's own, so its note places them in the ABI's argument registers:
 * a consumer that reads them there without decoding the note (the design
 * doc's first version does) reads them right.
 *
 * Built only when <sys/sdt.h> is found (Debian: systemtap-sdt-dev; meson
 * says which in its output): without it the calls below compile to nothing.
 * A leaf: no client state.
 */
#ifndef HEAPSCOPE_CLIENT_PROBES_H
#define HEAPSCOPE_CLIENT_PROBES_H

#include <stdint.h>

#include "common.h"

#ifdef HS_HAVE_SDT

/* The semaphores, named as <sys/sdt.h> expects (provider_name_semaphore).
 * Written by the tracer from outside, hence the relaxed atomic loads. */
extern unsigned short otel_memory_alloc_semaphore HS_HIDDEN;
extern unsigned short otel_memory_free_semaphore HS_HIDDEN;

/* The probe sites (probes.c). Called only with a tracer attached. */
HS_HIDDEN void hs_probe_alloc_fire(void *ptr, uint64_t size, uint64_t weight);
HS_HIDDEN void hs_probe_free_fire(void *ptr);

static inline void hs_probe_alloc(void *ptr, uint64_t size, uint64_t weight) {
  if (HS_UNLIKELY(__atomic_load_n(&otel_memory_alloc_semaphore, __ATOMIC_RELAXED)))
    hs_probe_alloc_fire(ptr, size, weight);
}

static inline void hs_probe_free(void *ptr) {
  if (HS_UNLIKELY(__atomic_load_n(&otel_memory_free_semaphore, __ATOMIC_RELAXED)))
    hs_probe_free_fire(ptr);
}

#else

static inline void hs_probe_alloc(void *ptr, uint64_t size, uint64_t weight) {
  (void)ptr;
  (void)size;
  (void)weight;
}

static inline void hs_probe_free(void *ptr) { (void)ptr; }

#endif

#endif
