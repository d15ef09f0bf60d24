"""What allocation labels (docs/labels.md) cost a small loopback TCP server, per request.

Two servers, each answering one client process over loopback TCP, one request at a time:
a 64-byte request (a tenant of 8 and a route of 4) and a 256-byte answer.

- C: reads the request, allocates, fills and frees 16 blocks of 32 B to 4 KiB and keeps one
  of 64 B in a ring (as labels_overhead.py's request), writes the answer; with labels it
  pushes tenant and route (the server's own string constants for them) around it.
- Python (asyncio.start_server): decodes the request, builds a small dict and its JSON
  answer; with labels the handler runs in `with heapscope.label(tenant=..., route=...)`.

Each server runs under `heapscope record` (default interval) with labels and without, in
interleaved rounds; the figure is the serving thread's CPU time per request (from its first
request to its last; CLOCK_THREAD_CPUTIME_ID, time.thread_time()), the median of the
rounds: CPU time moves less with the machine's load than wall time does, and the client's
own time is not in it.

    python benchmarks/labels_server.py [--requests 20000] [--rounds 5] [--only c|python]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labels_overhead import REQUEST_WORK  # the same request work as the pipe loop

REQUEST, ANSWER = 64, 256

C_SERVER = r"""
#include <heapscope.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *TENANTS[8] = {"acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"};
static const char *ROUTES[4] = {"/search", "/cart", "/login", "/static"};
""" + REQUEST_WORK + r"""

static int full(int fd, char *buf, size_t n, int out) {
  for (size_t done = 0; done < n;) {
    ssize_t k = out ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
    if (k <= 0)
      return -1;
    done += (size_t)k;
  }
  return 0;
}

__attribute__((noinline)) static void handle(long i, char *answer) {
  unsigned long h = request_work(i);
  snprintf(answer, 256, "ok %lu", h);
  sink = h;
}

static double cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 4)
    return 2;
  int labels = atoi(argv[1]);
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &alen) != 0)
    return 1;
  FILE *pf = fopen(argv[2], "w");
  fprintf(pf, "%d\n", ntohs(a.sin_port));
  fclose(pf);
  int fd = accept(ls, NULL, NULL);
  if (fd < 0)
    return 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char req[64], answer[256];
  memset(answer, ' ', sizeof answer);
  long n = 0;
  double t0 = 0;
  while (full(fd, req, sizeof req, 0) == 0) {
    if (n == 0)
      t0 = cpu();
    int tenant = (req[0] - '0') & 7, route = (req[1] - '0') & 3;
    if (labels) {
      heapscope_label_push("tenant", TENANTS[tenant]);
      heapscope_label_push("route", ROUTES[route]);
    }
    handle(n, answer);
    if (labels) {
      heapscope_label_pop();
      heapscope_label_pop();
    }
    if (full(fd, answer, sizeof answer, 1) != 0)
      break;
    n++;
  }
  FILE *out = fopen(argv[3], "w");
  fprintf(out, "%.1f\n", n > 1 ? (cpu() - t0) * 1e9 / n : 0.0);
  fclose(out);
  return 0;
}
"""

C_CLIENT = r"""
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int port = atoi(argv[1]), one = 1;
  long n = atol(argv[2]);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
    return 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char req[64], answer[256];
  memset(req, ' ', sizeof req);
  for (long i = 0; i < n; i++) {
    req[0] = (char)('0' + i % 8);
    req[1] = (char)('0' + (i / 8) % 4);
    if (write(fd, req, sizeof req) != sizeof req)
      return 1;
    for (size_t done = 0; done < sizeof answer;) {
      ssize_t k = read(fd, answer + done, sizeof answer - done);
      if (k <= 0)
        return 1;
      done += (size_t)k;
    }
  }
  close(fd);
  return 0;
}
"""

PY_SERVER = r'''
import asyncio, json, socket, sys, time
from heapscope import label  # imported at start, as a server would

TENANTS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"]
ROUTES = ["/search", "/cart", "/login", "/static"]
labels, port_file, out_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
kept: list[bytes] = [b""] * 4096


def handle(n: int, tenant: str, route: str, req: bytes) -> bytes:
    items = [{"id": n * 10 + k, "name": f"item{k}", "price": k * 1.5} for k in range(8)]
    kept[n % 4096] = bytes(64)
    body = json.dumps({"tenant": tenant, "route": route, "n": n, "items": items}).encode()
    return body[:256].ljust(256)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n, t0 = 0, 0.0
    while True:
        try:
            req = await reader.readexactly(64)
        except asyncio.IncompleteReadError:
            break
        if n == 0:
            t0 = time.thread_time()
        tenant, route = TENANTS[(req[0] - 48) & 7], ROUTES[(req[1] - 48) & 3]
        if labels:
            with label(tenant=tenant, route=route):
                answer = handle(n, tenant, route, req)
        else:
            answer = handle(n, tenant, route, req)
        writer.write(answer)
        await writer.drain()
        n += 1
    with open(out_file, "w") as f:
        f.write(f"{(time.thread_time() - t0) * 1e9 / max(n, 1):.1f}\n")
    writer.close()
    done.set_result(None)


async def main() -> None:
    global done
    done = asyncio.get_running_loop().create_future()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    with open(port_file, "w") as f:
        f.write(f"{server.sockets[0].getsockname()[1]}\n")
    await done
    server.close()

asyncio.run(main())
'''


def include_dir() -> str:
    return subprocess.run([sys.executable, "-m", "heapscope", "--include"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def compile_c(d: Path, name: str, source: str) -> Path:
    (d / f"{name}.c").write_text(source)
    out = d / name
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-I", include_dir(), "-o", str(out), str(d / f"{name}.c")],
                   check=True, timeout=120)
    return out


def one_run(d: Path, server: list[str], client: Path, labels: bool, requests: int, k: int) -> float:
    """The server's CPU ns per request in one profiled run against the client."""
    port_file, out_file = d / f"port{k}", d / f"out{k}"
    for f in (port_file, out_file):
        f.unlink(missing_ok=True)
    rec = subprocess.Popen([sys.executable, "-m", "heapscope", "record", "-q", "-o", str(d / f"run{k}.db"), "--",
                            *server, str(int(labels)), str(port_file), str(out_file)])
    try:
        deadline = time.monotonic() + 120
        while not (port_file.exists() and port_file.read_text().endswith("\n")):
            if rec.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start (record's status {rec.returncode})")
            time.sleep(0.05)
        port = port_file.read_text().strip()
        subprocess.run([str(client), port, str(requests)], check=True, timeout=1800)
        if rec.wait(timeout=600) != 0:
            raise SystemExit(f"record exited {rec.returncode}")
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait(timeout=60)
    return float(out_file.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("c", "python"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        client = compile_c(d, "client", C_CLIENT)
        servers: dict[str, list[str]] = {"c": [str(compile_c(d, "server", C_SERVER))]}
        (d / "server.py").write_text(PY_SERVER)
        servers["python"] = [sys.executable, str(d / "server.py")]
        k = 0
        for name, server in servers.items():
            if args.only and name != args.only:
                continue
            got: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for labels in (False, True):
                    k += 1
                    got[labels].append(one_run(d, server, client, labels, args.requests, k))
            plain, labelled = statistics.median(got[False]), statistics.median(got[True])
            print(f"{name:<7} server CPU a request, profiled, median of {args.rounds}: plain {plain / 1000:.2f} us,"
                  f" labels {labelled / 1000:.2f} us: {100 * (labelled - plain) / plain:+.2f}%"
                  f"  (runs, ns: plain {sorted(got[False])}, labels {sorted(got[True])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
