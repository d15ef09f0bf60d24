/*
 * connect.h: the session's connection to the producer (connect.c): the
 * socket, kept above the numbers programs reuse and pinned open, the
 * handshake and the mapped ring. The session layer's (session.c) alone.
 */
#ifndef HEAPSCOPE_CLIENT_CONNECT_H
#define HEAPSCOPE_CLIENT_CONNECT_H

#include <stdint.h>
#include <sys/types.h>

#include "common.h"
#include "wire.h"

/* The producer's socket, as connected (-1: none). */
struct hs_conn {
  int sock;
  uint64_t sock_dev, sock_ino; /* identity of sock (connect.c, keep_high) */
  pid_t pid;                   /* the process that connected */
};

extern struct hs_conn hs_conn HS_HIDDEN;

/* Connects to the producer at path with token (32 hex digits), does the
 * handshake, maps the ring into hs_session.ring (state.h) and sets hs_conn.
 * Returns 0 when profiling can start, -1 when not (said with hs_debug).
 * Bounded: the socket has 10 s timeouts. */
HS_HIDDEN HS_MUST_CHECK int hs_connect_producer(const char *path, const char *token,
                                                struct hs_config *cfg);

#endif
