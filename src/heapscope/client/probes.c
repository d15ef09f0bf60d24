/* probes.c: the otel_memory probe sites and their semaphores (probes.h).
 * Built by meson only when it found <sys/sdt.h>, with HS_HAVE_SDT; empty
 * without it (a by-hand build of every client file, tests/unit/client). */
#include "probes.h"

#ifdef HS_HAVE_SDT

#include <stdint.h>

/* The semaphores make each probe's note carry the address of its counter,
 * which a tracer increments while it is attached (probes.h). */
#define _SDT_HAS_SEMAPHORES 1
/* Registers only, never a memory operand: with the register variables below
 * the note names the ABI's argument registers. */
#define STAP_SDT_ARG_CONSTRAINT r
#include <sys/sdt.h>

/* In .probes, where tracers look for USDT semaphores; 16 bits, as sdt.h and
 * its consumers (gdb, bcc, libbpf) expect. */
unsigned short otel_memory_alloc_semaphore __attribute__((section(".probes"))) HS_HIDDEN;
unsigned short otel_memory_free_semaphore __attribute__((section(".probes"))) HS_HIDDEN;

/* Each argument pinned to the register the calling convention gave it, so
 * the note reads "8@%rdi 8@%rsi 8@%rdx" (x0, x1, x2 on arm64) whatever the
 * compiler would have chosen: the design doc's first consumer reads the
 * arguments from those registers without decoding the note. Elsewhere the
 * note says where they are. */
#if defined(__x86_64__)
#define ARG_REG(name, reg, value) register uint64_t name __asm__(reg) = (uint64_t)(value)
#define REG0 "rdi"
#define REG1 "rsi"
#define REG2 "rdx"
#elif defined(__aarch64__)
#define ARG_REG(name, reg, value) register uint64_t name __asm__(reg) = (uint64_t)(value)
#define REG0 "x0"
#define REG1 "x1"
#define REG2 "x2"
#else
#define ARG_REG(name, reg, value) uint64_t name = (uint64_t)(value)
#endif

/* Out of line and never cloned: the probe's pc is in a function of its own
 * (an unwinder starts from it with the function's CFI), called only while a
 * tracer holds the semaphore. */
#define PROBE_SITE __attribute__((noinline, noclone, cold))

PROBE_SITE void hs_probe_alloc_fire(void *ptr, uint64_t size, uint64_t weight) {
  ARG_REG(a0, REG0, (uintptr_t)ptr);
  ARG_REG(a1, REG1, size);
  ARG_REG(a2, REG2, weight);
  STAP_PROBE3(otel_memory, alloc, a0, a1, a2);
}

PROBE_SITE void hs_probe_free_fire(void *ptr) {
  ARG_REG(a0, REG0, (uintptr_t)ptr);
  STAP_PROBE1(otel_memory, free, a0);
}

#endif
