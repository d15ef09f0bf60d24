/*
 * session.h: what the session layer (session.c) exports: the attach entry
 * point, which `heapscope record -p PID` calls through gdb.
 */
#ifndef HEAPSCOPE_CLIENT_SESSION_H
#define HEAPSCOPE_CLIENT_SESSION_H

#include "common.h"

/* What heapscope_attach() returns (the producer reads it through gdb). */
enum hs_attach_result {
  HS_ATTACH_OK = 0,
  HS_ATTACH_BUSY = 1,       /* this process has a session that has not ended */
  HS_ATTACH_NO_SESSION = 2, /* connect or handshake failed: stays dormant */
  HS_ATTACH_NO_HOOKS = 3,   /* profiling, but no GOT entry could be patched */
  HS_ATTACH_DRAINING = 4,   /* a thread stayed inside the ended session's client */
};

HS_EXPORT int heapscope_attach(const char *socket_path, const char *token);

#endif
