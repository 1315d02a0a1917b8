#!/bin/bash
# Makes docs/heat-map-example/: a real trace replayed through a running
# stratad over iSCSI, then `strata heat map` and `strata heat report` on the
# pool, live and offline on a copy of its metadata (which must match).
#
#   tools/tracereplay/heat-example.sh [TRACE [NAME [REPLAYER OPTIONS...]]]
#
# TRACE defaults to /work/shared/traces/cloudphysics_vscsi_2h.csv.gz and NAME
# (the output files' prefix) to cloudphysics; the replayer's options default
# to --speedup 30. Run from the repository, after
# the release build. Takes 6-8 minutes; state in /var/tmp/strata-traceheat-$$,
# removed at the end (HEAT_EXAMPLE_KEEP=DIR keeps a copy of the pool's
# metadata, for `strata heat map pools/p1 --metadata DIR` later).
#
# The set-up, and why:
#   - the small shelf's v1 grown to 8 GiB (the trace's 1,312 touched extents,
#     folded modulo 8 GiB, are 1,038: twice the SSD tier's 2 GiB), with
#     capacity affinity while it is prefilled, so that every extent starts on
#     the HDDs, then auto, so that the migrator has to find the hot set;
#   - a heat snapshot every 10 s, so that a few minutes' replay makes a map
#     of some 30 columns;
#   - after the replay, a minute more for the migrator to finish its moves.
set -euo pipefail
cd "$(dirname "$0")/../.."
trace=${1:-/work/shared/traces/cloudphysics_vscsi_2h.csv.gz}
name=${2:-cloudphysics}
shift $(( $# > 2 ? 2 : $# ))
replay_options=("$@")
[ ${#replay_options[@]} -gt 0 ] || replay_options=(--speedup 30)
out=docs/heat-map-example
work=/var/tmp/strata-traceheat-$$
mkdir -p "$work" "$out"
# Copies, so that a rebuild meanwhile (the machine is shared) does not pull
# the binaries from under the run.
cp build/release/controller/stratad build/release/tools/strata "$work/"
stratad=$work/stratad
cli=$work/strata

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
iscsi_port=$((20000 + RANDOM % 10000))
while ! port_free $iscsi_port || ! port_free $((iscsi_port + 1)); do iscsi_port=$((iscsi_port + 2)); done
api=127.0.0.1:$((iscsi_port + 1))
url=iscsi://127.0.0.1:$iscsi_port/iqn.2026-11.io.strata:array/0
strata() { "$cli" --api "$api" "$@"; }

daemon=
cleanup() {
  [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null && kill -TERM "$daemon" && wait "$daemon" || true
  rm -rf "$work"
}
trap cleanup EXIT

"$stratad" --state-dir "$work/state" --small-shelf --nvme off --iscsi "127.0.0.1:$iscsi_port" --grpc "$api" \
  --http off --heat-history-interval-s 10 >"$work/stdout" 2>"$work/stratad.log" &
daemon=$!
for _ in $(seq 100); do grep -q "stratad is ready" "$work/stdout" && break; sleep 0.2; done
grep -q "stratad is ready" "$work/stdout" || { cat "$work/stratad.log"; exit 1; }
echo "stratad on iSCSI 127.0.0.1:$iscsi_port, API $api"

strata volume update v1 --size 8G --affinity capacity
tools/tracereplay/tracereplay.py "$trace" "$url" --prefill-only "${replay_options[@]}" | grep prefill
strata volume update v1 --affinity auto
sleep 12  # a snapshot with every extent cold on the HDDs
tools/tracereplay/tracereplay.py "$trace" "$url" "${replay_options[@]}" | tee "$work/replay.txt"
echo "the migrator's last moves"
sleep 60

# Live, just after a snapshot, so that none is taken between these and the stop.
snapshots() { strata --json heat map pools/p1 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["snapshots"]))'; }
count=$(snapshots)
while [ "$(snapshots)" = "$count" ]; do sleep 0.5; done
strata heat map pools/p1 --svg "$out/$name.svg"
strata heat map pools/p1 --png "$out/$name.png"
strata heat map pools/p1 >"$out/$name-map.txt"
strata heat report pools/p1 >"$out/$name-report.txt"
strata --json heat map pools/p1 >"$work/live.json"
# The migrator's own count, to set beside the moves the heat history shows.
strata --json pool stats p1 | python3 -c 'import json, sys
s = json.load(sys.stdin)
s = s[0] if isinstance(s, list) else s
print("migrator promotions %s demotions %s migrated_bytes %s" % (s["promotions"], s["demotions"], s["migrated_bytes"]))' \
  >>"$work/replay.txt"
kill -TERM "$daemon"
wait "$daemon"
daemon=

cp -a "$work/state/pools/p1" "$work/p1-copy"
# HEAT_EXAMPLE_KEEP=DIR keeps the metadata copy there, to draw the map again
# offline later (with a newer strata); remove it when done.
if [ -n "${HEAT_EXAMPLE_KEEP:-}" ]; then mkdir -p "$(dirname "$HEAT_EXAMPLE_KEEP")"; cp -a "$work/p1-copy" "$HEAT_EXAMPLE_KEEP"; fi
"$cli" heat map pools/p1 --metadata "$work/p1-copy" --svg "$work/off.svg"
"$cli" heat map pools/p1 --metadata "$work/p1-copy" --png "$work/off.png"
"$cli" heat map pools/p1 --metadata "$work/p1-copy" >"$work/off-map.txt"
"$cli" heat report pools/p1 --metadata "$work/p1-copy" >"$work/off-report.txt"
"$cli" --json heat map pools/p1 --metadata "$work/p1-copy" >"$work/off.json"

# What may differ, by design: the first line names the source (the API or
# the copy); the interval is the configured one live and the median gap
# offline; the SVG's subtitle names the source; the report's "HOTTEST EXTENTS
# NOW" is the array's current heat (ListHeat) live and the last snapshot's
# offline. Everything else must be the same.
normal() {
  case "$1" in
    *report*) sed -n '/^MOVES/,$p' "$1" ;;
    *.svg) sed 's/>live, through [^;]*;/>SOURCE;/; s/>offline, [^;]*;/>SOURCE;/' "$1" ;;
    *) tail -n +2 "$1" ;;
  esac | sed 's/one every [^;,]*/one every -/'
}
compare() {
  if cmp -s <(normal "$1") <(normal "$2"); then echo same; else echo "DIFFERENT:"; diff <(normal "$1") <(normal "$2") | head -20; fi
}
{
  echo "live against offline (--metadata on a copy of STATE/pools/p1):"
  echo "  snapshots (JSON):  $(if cmp -s "$work/live.json" "$work/off.json"; then echo same; else echo DIFFERENT; fi)"
  echo "  text map:          $(compare "$out/$name-map.txt" "$work/off-map.txt")"
  echo "  report from MOVES: $(compare "$out/$name-report.txt" "$work/off-report.txt")"
  echo "  SVG:               $(compare "$out/$name.svg" "$work/off.svg")"
  echo "  PNG:               $(if cmp -s "$out/$name.png" "$work/off.png"; then echo same; else echo DIFFERENT; fi)"
  echo "  report, first lines offline:"
  head -3 "$work/off-report.txt" | sed 's/^/    /'
} | tee "$work/compare.txt"
cp "$work/replay.txt" "$out/$name-replay.txt"
cp "$work/compare.txt" "$out/$name-live-vs-offline.txt"
# 925-odd extents by 40 snapshots make a 7 MB SVG: kept gzipped (under 400 KB).
gzip -9nf "$out/$name.svg"
