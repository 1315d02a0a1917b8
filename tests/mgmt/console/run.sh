#!/usr/bin/env bash
# The web console in a real browser: starts stratad on a small shelf
# (loopback ports, its own state directory, removed at the end), then
# console_test.mjs drives Debian's Chromium through playwright-core (the
# npm package only: no browser download) against the console stratad
# serves, and checks it with the strata CLI, qemu-io over iSCSI and the
# JSON API; then a second stratad, with TLS and a token, for the login
# (login_test.mjs). Screenshots go to docs/console/.
#   run.sh PATH/TO/stratad PATH/TO/strata
# Environment: CONSOLE_SCREENSHOTS=DIR (default docs/console of the tree);
# CONSOLE_DIR=DIR serves the console from DIR (stratad --console-dir)
# instead of the copy built into stratad.
set -uo pipefail
stratad=$1
cli=$2
here=$(cd "$(dirname "$0")" && pwd)
tree=$(cd "$here/../../.." && pwd)
for tool in node npm qemu-io qemu-img python3 openssl; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (apt-get install nodejs npm qemu-utils qemu-block-extra python3 openssl)"; exit 77; }
done
[[ -x /usr/bin/chromium ]] || { echo "SKIP: /usr/bin/chromium is missing (apt-get install chromium)"; exit 77; }
if [[ ! -d "$here/node_modules/playwright-core" ]]; then
  # playwright-core only: its postinstall downloads no browser.
  (cd "$here" && npm ci --no-audit --no-fund >/dev/null 2>"$here/.npm-ci.err") ||
    { echo "SKIP: npm ci (playwright-core) failed:"; cat "$here/.npm-ci.err"; rm -f "$here/.npm-ci.err"; exit 77; }
  rm -f "$here/.npm-ci.err"
fi
"$stratad" --help 2>&1 | grep -q -- '--http' || { echo "FAIL: $stratad has no --http (the HTTP server and console)"; exit 1; }

state=$(mktemp -d /var/tmp/strata-console.XXXXXX)
pid=
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -rf "$state"
}
trap cleanup EXIT

# start NAME ARGS...: stratad on a small shelf in $state/NAME, on free
# loopback ports ($iscsi, $grpc, $http: bound to port 0 and let go, for
# stratad to bind next), ready; or exits 1 with its log.
start() {
  local name=$1
  shift
  read -r iscsi grpc http < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
  "$stratad" --state-dir "$state/$name" --small-shelf --iscsi "127.0.0.1:$iscsi" --grpc "127.0.0.1:$grpc" \
    --http "127.0.0.1:$http" --nvme off "${console_args[@]}" "$@" >"$state/$name.out" 2>"$state/$name.err" &
  pid=$!
  for _ in $(seq 300); do
    grep -q "stratad is ready" "$state/$name.out" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: stratad ($name) did not become ready"
  tail -n 40 "$state/$name.err"
  exit 1
}
stop() {
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  pid=
}
console_args=()
[[ -n "${CONSOLE_DIR:-}" ]] && console_args=(--console-dir "$CONSOLE_DIR")

# The console's pages and actions. A snapshot of the heat history every
# 10 s (the shortest), so that the heat map has history within the test.
start plain --heat-history-interval-s 10
CONSOLE_URL="http://127.0.0.1:$http" STRATA="$cli" STRATA_API="127.0.0.1:$grpc" ISCSI_PORTAL="127.0.0.1:$iscsi" \
  SCREENSHOTS="${CONSOLE_SCREENSHOTS:-$tree/docs/console}" BROWSER_PROFILE="$state/chromium" \
  node "$here/console_test.mjs" | tee "$state/checks.out"
status=${PIPESTATUS[0]}
((status != 0)) && { echo "---- the last 60 lines of stratad's log"; tail -n 60 "$state/plain.err"; }
stop

# The login: TLS (a self-signed certificate for 127.0.0.1) and a token.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$state/key.pem" -out "$state/cert.pem" 2>/dev/null
token=$(openssl rand -hex 24)
echo "$token" >"$state/token"
start secure --grpc-tls-cert "$state/cert.pem" --grpc-tls-key "$state/key.pem" --grpc-token-file "$state/token"
CONSOLE_URL="https://127.0.0.1:$http" TOKEN="$token" BROWSER_PROFILE="$state/chromium-login" node "$here/login_test.mjs" | tee -a "$state/checks.out"
login_status=${PIPESTATUS[0]}
((login_status != 0)) && { echo "---- the last 60 lines of stratad's log"; tail -n 60 "$state/secure.err"; }
stop
# What failed, repeated last: CI shows the end of a long output.
if ((status != 0 || login_status != 0)); then
  echo "---- what failed"
  grep -E '^FAIL' "$state/checks.out" || echo "FAIL: no check failed, but a test exited with status $status / $login_status"
fi
((status == 0 && login_status == 0))
