#!/bin/sh
# TCP smoke test (ctest example_tcp_smoke): serve_tcp on 127.0.0.1 (CPU executor, free port), then
# loadgen_tcp checks malformed frames, runs ~1 s of verified pipelined load and sends Shutdown;
# the server must exit 0 on its own. Loopback only; bounded in time; fails if anything failed.
# Usage: tcp_smoke_test.sh SERVE_TCP LOADGEN_TCP [KV_CACHE_TYPE]   (fp16, the default, or fp8_e4m3:
# the server's --kv-cache-type; loadgen learns it from Info and verifies against the codes)
set -u
case "${1:-}" in -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
if [ $# -ne 2 ] && [ $# -ne 3 ]; then
  echo "usage: tcp_smoke_test.sh SERVE_TCP LOADGEN_TCP [KV_CACHE_TYPE] (see --help)" >&2
  exit 2
fi
serve=$1
loadgen=$2
kv_cache_type=${3:-fp16}
dir=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill "$server_pid"; fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "tcp_smoke_test: FAILED: $*"
  echo "--- server log"
  cat "$dir/server.log"
  exit 1
}

"$serve" --device cpu --bind 127.0.0.1 --port 0 --max-seconds 60 --layers 2 --heads 8 \
  --kv-heads 2 --head-dim 64 --block-size 16 --max-context 512 --window-us 200 \
  --kv-cache-type "$kv_cache_type" > "$dir/server.log" 2>&1 &
server_pid=$!

# The banner names the port; allow 20 s for the runtime to start.
port=
i=0
while [ $i -lt 200 ]; do
  port=$(sed -n 's/^serve_tcp: listening on 127\.0\.0\.1:\([0-9][0-9]*\) .*/\1/p' "$dir/server.log")
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "serve_tcp exited before its banner"
  sleep 0.1
  i=$((i + 1))
done
[ -n "$port" ] || fail "no banner from serve_tcp within 20 s"
grep -q "kv cache $kv_cache_type\$" "$dir/server.log" || fail "the banner does not say kv cache $kv_cache_type"
echo "tcp_smoke_test: serve_tcp on 127.0.0.1:$port"

"$loadgen" --host 127.0.0.1 --port "$port" --check-malformed --verify --rate 300 --duration 1 \
  --sequences 6 --context 40 --connections 2 --drain-timeout 10 --shutdown-server ||
  fail "loadgen_tcp failed"

# Shutdown was acknowledged: the server drains and exits by itself within a few seconds.
i=0
while kill -0 "$server_pid" 2>/dev/null; do
  [ $i -lt 150 ] || fail "serve_tcp still running 15 s after Shutdown"
  sleep 0.1
  i=$((i + 1))
done
wait "$server_pid"
rc=$?
server_pid=
cat "$dir/server.log"
[ $rc -eq 0 ] || fail "serve_tcp exited with $rc"
grep -q '^serve_tcp: summary: ' "$dir/server.log" || fail "no summary from serve_tcp"
echo "tcp_smoke_test: OK"
