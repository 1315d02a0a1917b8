#!/usr/bin/env bash
# stratad's benchmark: start-up time and management API latency.
#
#   tools/stratadbench/stratad-bench.sh [--stratad PATH] [--cli PATH] [--volumes N] [--requests N]
#
# Start-up: from an empty state directory (the embedded default: 23 model
# drives in sparse files, 4 groups formatted, a pool, a 100 GiB volume), a
# restart of it, and a restart after N more volumes (default 100) were made
# through the CLI, each mapped as a LUN. Each start is timed from exec to
# the "ready" line, three times, median printed.
# API latency: ghz (from the Go module proxy; tools/install-deps.sh) drives
# ListVolumes and GetVolume with 16 concurrent clients, --requests calls each
# (default 20000), and prints p50, p99 and the rate. Without ghz it says so
# and skips that part. No peer runs here: the issue names none for this.
set -uo pipefail
cd "$(dirname "$0")/../.."
stratad=build/release/controller/stratad
cli=build/release/tools/strata
volumes=100
requests=20000
while (($# > 0)); do
  case "$1" in
    --stratad) stratad=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --volumes) volumes=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    *) echo "stratad-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
state=$(mktemp -d /var/tmp/stratad-bench.XXXXXX)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$state"' EXIT
iscsi=127.0.0.1:$((30000 + RANDOM % 10000))
api=127.0.0.1:$((40000 + RANDOM % 10000))

# start: runs stratad, prints the seconds to its ready line
start() {
  local t0 t1
  t0=$(date +%s.%N)
  "$stratad" --state-dir "$state" --iscsi "$iscsi" --grpc "$api" >"$state/out" 2>"$state/err" &
  pid=$!
  until grep -q "stratad is ready" "$state/out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "stratad-bench: stratad died" >&2; cat "$state/err" >&2; exit 1; }
    sleep 0.01
  done
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
stop() { kill -TERM "$pid"; wait "$pid"; pid=; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

empty=$(for i in 1 2 3; do rm -rf "${state:?}"/{config,shelf,pools,stratad.lock}; start; stop; done | median)
restart=$(for i in 1 2 3; do start; stop; done | median)
start >/dev/null
for i in $(seq "$volumes"); do
  "$cli" --api "$api" volume create "b$i" --size 1G >/dev/null || { echo "stratad-bench: volume create failed" >&2; exit 1; }
  "$cli" --api "$api" map "b$i" --lun "$i" >/dev/null || { echo "stratad-bench: map failed" >&2; exit 1; }
done
stop
many=$(for i in 1 2 3; do start; stop; done | median)
printf '%-46s %8s\n' "start-up (median of 3)" "seconds"
printf '%-46s %8.3f\n' "empty state: build the embedded default" "$empty"
printf '%-46s %8.3f\n' "restart: assemble 4 groups, open the pool" "$restart"
printf '%-46s %8.3f\n' "restart with $((volumes + 1)) volumes, $((volumes + 1)) LUNs" "$many"

if ! command -v ghz >/dev/null; then
  echo "SKIP: ghz is missing (tools/install-deps.sh installs it from the Go module proxy when Go is here): no API latency"
  exit 0
fi
start >/dev/null
printf '%-28s %10s %10s %12s\n' "API call (16 clients)" "p50 ms" "p99 ms" "calls/s"
for call in ListVolumes GetVolume; do
  data='{"parent": "pools/p1", "page_size": 100}'
  [[ $call == GetVolume ]] && data='{"name": "pools/p1/volumes/b50"}'
  ghz --insecure --call "strata.v1.Array/$call" -d "$data" -c 16 -n "$requests" --format json "$api" >"$state/ghz.json" 2>"$state/ghz.err" ||
    { echo "stratad-bench: ghz failed"; cat "$state/ghz.err"; exit 1; }
  python3 - "$call" "$state/ghz.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
lat = {d["percentage"]: d["latency"] / 1e6 for d in r["latencyDistribution"]}
errors = sum(v for k, v in r.get("statusCodeDistribution", {}).items() if k != "OK")
print(f"{sys.argv[1]:<28} {lat[50]:10.3f} {lat[99]:10.3f} {r['rps']:12.0f}" + (f"   ({errors} errors)" if errors else ""))
PY
done
stop
