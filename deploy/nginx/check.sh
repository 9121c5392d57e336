#!/usr/bin/env bash
# Check deploy/nginx/colibri.conf for real: `nginx -t` on a minimal nginx.conf that includes it,
# then nginx on loopback in front of a running `colibri serve --port 0` with the shipped model,
# a streamed chat completion through it (timestamps per SSE line show chunks arrive as they are
# generated, not at the end), the Host, /health and /metrics rules; both are stopped at the end.
# Usage (repository root, after `cargo build --release`): deploy/nginx/check.sh
# Needs nginx (Debian: apt-get install nginx-light), curl and python3 (to find a free port).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${COLIBRI_BIN:-$root/target/release/colibri}
model=${COLIBRI_MODEL:-$root/models/default.colibri}
work=$(mktemp -d /tmp/colibri-nginx-check.XXXXXX)
colibri_pid=""
nginx_started=""
cleanup() {
    if [ -n "$nginx_started" ]; then nginx -p "$work" -c "$work/nginx.conf" -s quit 2>/dev/null || true; fi
    if [ -n "$colibri_pid" ]; then kill -TERM "$colibri_pid" 2>/dev/null && wait "$colibri_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# 1. colibri on a free loopback port; scalar kernels on one thread by default, so that the tiny
# shipped model generates slowly enough (~5 ms a token) for the stream's spread to be visible.
COLIBRI_CPU=${COLIBRI_CPU:-generic} "$bin" serve -m "$model" --port 0 --threads "${THREADS:-1}" 2>"$work/colibri.log" &
colibri_pid=$!
for _ in $(seq 100); do grep -q '^listening on' "$work/colibri.log" && break; sleep 0.1; done
upstream=$(sed -n 's|^listening on http://||p' "$work/colibri.log")
for _ in $(seq 300); do curl -sf "http://$upstream/health" >/dev/null && break; sleep 0.1; done
echo "colibri: $upstream (pid $colibri_pid)"

# 2. The snippet with its upstream and listen port replaced, inside a minimal nginx.conf.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# A second upstream on a port nothing listens on stands for a replica that is down.
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|server 127.0.0.1:8080 \(.*\)|server $upstream \1 server 127.0.0.1:$dead \1|" \
    -e "s|listen 80;|listen 127.0.0.1:$port;|" \
    "$root/deploy/nginx/colibri.conf" >"$work/colibri.conf"
cat >"$work/nginx.conf" <<CONF
daemon on;
pid $work/nginx.pid;
error_log $work/error.log;
worker_processes 1;
events { worker_connections 64; }
http {
    access_log $work/access.log;
    client_body_temp_path $work/client_body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    include $work/colibri.conf;
}
CONF
echo "--- nginx -t"
nginx -t -p "$work" -c "$work/nginx.conf"
nginx -p "$work" -c "$work/nginx.conf"
nginx_started=1
base="http://127.0.0.1:$port"
echo "nginx: $base"

echo "--- GET /health through nginx"
curl -sS -w '  -> HTTP %{http_code}\n' "$base/health"
echo "--- 6 x GET /v1/models with one of the two upstreams down (proxy_next_upstream)"
for _ in 1 2 3 4 5 6; do curl -sS -o /dev/null -w '%{http_code} ' "$base/v1/models"; done
echo "($(grep -c 'connect() failed' "$work/error.log" || true) refused connections to the dead upstream in nginx's error log)"
echo "--- GET /metrics through nginx from loopback (allowed)"
curl -sS -o /dev/null -w 'HTTP %{http_code}\n' "$base/metrics"
echo "--- GET /v1/models with a foreign Host: nginx rewrites Host, so colibri (loopback) accepts it"
curl -sS -o /dev/null -w 'HTTP %{http_code}\n' -H 'Host: api.example.com' "$base/v1/models"
echo "--- the same request straight to colibri with that Host (refused: DNS-rebinding guard)"
curl -sS -o /dev/null -w 'HTTP %{http_code}\n' -H 'Host: api.example.com' "http://$upstream/v1/models"

body='{"messages":[{"role":"user","content":"And the LORD said"}],"stream":true,"max_tokens":300,"seed":1}'
# Stream $body from $1 with curl -N into $2, one "microseconds line" per SSE line (bash's
# $EPOCHREALTIME: no fork per line, which would itself spread the lines out); print the spread.
stream() {
    curl -sS -N -H 'Content-Type: application/json' -d "$body" "$1/v1/chat/completions" |
        while IFS= read -r line; do
            if [ -n "$line" ]; then printf '%s %s\n' "${EPOCHREALTIME/./}" "$line"; fi
        done >"$2"
    tail -n 1 "$2" | grep -q 'data: \[DONE\]'
    awk 'NR == 1 { first = $1 } { last = $1; buckets[int(($1 - first) / 1e4)] = 1 }
         END { n = 0; for (b in buckets) n++;
               printf "%d SSE lines over %.0f ms, arriving in %d distinct 10 ms windows\n", NR, (last - first) / 1e3, n }' "$2"
}
echo "--- streamed chat completion through nginx (curl -N), a timestamp per SSE line"
stream "$base" "$work/stream.txt"
head -n 3 "$work/stream.txt" | cut -c1-150
echo "..."
tail -n 2 "$work/stream.txt" | cut -c1-150
echo "--- response headers of a stream through nginx"
curl -sS -N -D - -o /dev/null -H 'Content-Type: application/json' -d "$body" "$base/v1/chat/completions" | tr -d '\r'
echo "--- body larger than client_max_body_size (4m)"
head -c 5000000 /dev/zero | tr '\0' 'a' >"$work/big.json"
curl -sS -o /dev/null -w 'HTTP %{http_code}\n' -H 'Content-Type: application/json' --data-binary "@$work/big.json" "$base/v1/completions"
echo "nginx check passed"
