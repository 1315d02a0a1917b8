#!/usr/bin/env bash
# stratad's benchmark: start-up time and management API latency.
#
#   tools/stratadbench/stratad-bench.sh [--stratad PATH] [--cli PATH] [--filler PATH] [--volumes N]
#                                       [--extents-per-volume K] [--requests N]
#
# Start-up: from an empty state directory (the embedded default: 23 model
# drives in sparse files, 4 groups formatted, a pool, a 100 GiB volume), a
# restart of it, and a restart after N more volumes (default 100) were made
# through the CLI, each mapped as a LUN. Then the same N volumes are grown
# through the CLI and, stratad stopped, strata-fill-extents maps the first
# K extents (default 10,000) of each in the pool's metadata, through the
# pool's own allocator, without writing their data (N x K x 4 MiB is 4 TiB
# by default, past what this machine could write): the restart after it is
# the issue's "start-up from 100 volumes / 1 M extents". A volume's
# statistics must then show K extents allocated, or the run fails.
# Each start is timed from exec to the "ready" line, three times, median
# printed, with stratad's resident memory (VmRSS) once ready.
# API latency: ghz (from the Go module proxy; tools/install-deps.sh --apibench) drives
# ListVolumes and GetVolume with 16 concurrent clients, --requests calls each
# (default 20000), and prints p50, p99 and the rate, on the filled state (on
# the N-volume one if the filler is missing). Without ghz it says so and
# skips that part. No peer runs here: the issue names none for this.
set -uo pipefail
cd "$(dirname "$0")/../.."
stratad=build/release/controller/stratad
cli=build/release/tools/strata
filler=build/release/tools/strata-fill-extents
volumes=100
extents=10000
requests=20000
while (($# > 0)); do
  case "$1" in
    --stratad) stratad=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --filler) filler=$2; shift 2 ;;
    --volumes) volumes=$2; shift 2 ;;
    --extents-per-volume) extents=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    *) echo "stratad-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
state=$(mktemp -d /var/tmp/stratad-bench.XXXXXX)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$state"' EXIT
iscsi=127.0.0.1:$((30000 + RANDOM % 10000))
api=127.0.0.1:$((40000 + RANDOM % 10000))

# start: runs stratad, prints the seconds to its ready line and its VmRSS
# in KiB once ready
start() {
  local t0 t1 rss
  # A ready line left by the last run must not count for this one.
  rm -f "$state/out"
  t0=$(date +%s.%N)
  "$stratad" --state-dir "$state" --iscsi "$iscsi" --grpc "$api" >"$state/out" 2>"$state/err" &
  pid=$!
  until grep -q "stratad is ready" "$state/out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "stratad-bench: stratad died" >&2; cat "$state/err" >&2; exit 1; }
    sleep 0.01
  done
  t1=$(date +%s.%N)
  rss=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$pid/status")
  echo "$(echo "$t1 - $t0" | bc) $rss"
}
stop() { kill -TERM "$pid"; wait "$pid"; pid=; }
# median: of lines "seconds rss", the line of the median seconds
median() { sort -n | awk '{ v[NR] = $0 } END { print v[int((NR + 1) / 2)] }'; }
cli() { "$cli" --api "$api" "$@"; }
# timed: three starts and stops (after running "$@" before each), the median
# "seconds rss" line; a stratad that died has said why, and ends the run
timed() {
  local runs
  runs=$(for i in 1 2 3; do "$@"; start; stop; done)
  (($(wc -l <<<"$runs") == 3)) || exit 1
  median <<<"$runs"
}
fresh() { rm -rf "${state:?}"/{config,shelf,pools,stratad.lock}; }
# row LABEL SECONDS RSS_KIB
row() { printf '%-52s %8.3f %8.0f\n' "$1" "$2" "$(($3 / 1024))"; }

empty=$(timed fresh) || exit 1
restart=$(timed) || exit 1
start >/dev/null
for i in $(seq "$volumes"); do
  cli volume create "b$i" --size 1G >/dev/null || { echo "stratad-bench: volume create failed" >&2; exit 1; }
  cli map "b$i" --lun "$i" >/dev/null || { echo "stratad-bench: map failed" >&2; exit 1; }
done
stop
many=$(timed) || exit 1
printf '%-52s %8s %8s\n' "start-up (median of 3)" "seconds" "RSS MiB"
row "empty state: build the embedded default" $empty
row "restart: assemble 4 groups, open the pool" $restart
row "restart with $((volumes + 1)) volumes, $((volumes + 1)) LUNs" $many

# The filled pool. Volumes are grown through the CLI, so that the config
# store and the pool agree on their size; at the pool's default 4 MiB
# extents (the filler refuses a volume too small for K extents otherwise).
if [[ -x "$filler" ]]; then
  gib=$(((extents * 4 + 1023) / 1024))
  start >/dev/null
  for i in $(seq "$volumes"); do
    cli volume update "b$i" --size "${gib}G" >/dev/null || { echo "stratad-bench: volume update failed" >&2; exit 1; }
  done
  stop
  "$filler" --state-dir "$state" --extents "$extents" --prefix b >"$state/fill.out" 2>&1 ||
    { echo "stratad-bench: strata-fill-extents failed" >&2; cat "$state/fill.out" >&2; exit 1; }
  extent_bytes=$(sed -n 's/.*extent size: \([0-9]*\) bytes.*/\1/p' "$state/fill.out")
  filled=$(timed) || exit 1
  row "restart with $((volumes + 1)) volumes, $((volumes * extents)) extents mapped" $filled
  # The figure is real only if stratad sees the extents: b1's allocation.
  start >/dev/null
  allocated=$(cli --json volume stats b1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["allocated_bytes"])')
  [[ "$allocated" == "$((extents * extent_bytes))" ]] ||
    { echo "stratad-bench: b1 has $allocated bytes allocated, not $((extents * extent_bytes))" >&2; exit 1; }
  echo "(b1 reports $allocated bytes allocated: $extents extents of $extent_bytes bytes;" \
    "$(sed -n 's/^mapped [0-9]* new extents over [0-9]* volumes (\(.*\)):.*/\1/p' "$state/fill.out") in all)"
  stop
else
  echo "SKIP: $filler is missing: no start-up from $((volumes * extents)) mapped extents"
fi

if ! command -v ghz >/dev/null; then
  echo "SKIP: ghz is missing (tools/install-deps.sh --apibench installs it from the Go module proxy when Go is here): no API latency"
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
