#!/bin/bash
# The Ceph tier under a real trace, through the whole array: stratad on the
# simulated shelf (--small-shelf: RAID-6 over 7,200 rpm NL-SAS drive models,
# RAID-1 SSDs, a read cache), a single-node Ceph cluster as the pool's cold
# tier, and a trace of /work/shared/traces/ replayed over iSCSI by
# tools/tracereplay/tracereplay.py: once to warm the array (the extents
# it touches start on the HDD tier, the hot ones move to the SSD tier),
# then twice measured:
#   local  the hot set on the SSD tier, the cold set on the HDD tier: the
#          array without Ceph;
#   cold   the same, but the cold set in Ceph: every extent that stays idle
#          for the cooling (5 s here) after the local run goes there, the
#          SSD tier's too once its heat has decayed below the promotion
#          threshold (a hot extent is never cooled); cooling then off, and
#          the replay's reads find the cold set in Ceph, and the migrator
#          brings back what heats up.
# For each: the replay's IOPS and MB/s, and from the volume's own counters
# (VolumeStatistics.tier_reads) the share of read pieces each tier served
# and its latency (mean, and the p99 bucket), and the bytes the migrator
# moved (PoolStatistics).
#
#   tools/ceph/trace-bench.sh [TRACE [REPLAYER OPTIONS...]]
#
# Defaults: the CloudPhysics trace, --max-ios 20000 --speedup 30. Run from
# the repository after the release build; about 8 minutes. State (the
# shelf's sparse files, the cluster) in /var/tmp/strata-coldtrace-PID,
# removed at the end; the figures are printed and kept in
# /var/tmp/strata-coldtrace-PID.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
trace=${1:-/work/shared/traces/cloudphysics_vscsi_2h.csv.gz}
shift $(( $# > 1 ? 1 : $# ))
replay_options=("$@")
[ ${#replay_options[@]} -gt 0 ] || replay_options=(--max-ios 20000 --speedup 30)
work=/var/tmp/strata-coldtrace-$$
report=$work.txt
mkdir -p "$work"
# Copies, so that a rebuild meanwhile does not pull them from under the run.
cp build/release/controller/stratad build/release/tools/strata "$work/"
cli=$work/strata

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=$((20000 + RANDOM % 10000))
while ! port_free $port || ! port_free $((port + 1)) || ! port_free $((port + 2)); do port=$((port + 3)); done
api=127.0.0.1:$((port + 1))
url=iscsi://127.0.0.1:$port/iqn.2026-11.io.strata:array/0
strata() { "$cli" --api "$api" "$@"; }

daemon=
cleanup() {
  [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null && kill -TERM "$daemon" && wait "$daemon" || true
  tools/ceph/single-node.sh destroy "$work/ceph" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

started=$(date +%s.%N)
tools/ceph/single-node.sh start "$work/ceph" --port $((port + 2)) --osd-size 12G >/dev/null
source "$work/ceph/env"  # CEPH_CONF, CEPH_KEYRING, CEPH_MON
ceph -c "$CEPH_CONF" osd pool create strata-trace 16 >/dev/null 2>&1
rbd -c "$CEPH_CONF" pool init strata-trace
echo "Ceph up in $(python3 -c "import time; print(round(time.time() - $started, 1))") s at $CEPH_MON" | tee "$report"

"$work/stratad" --state-dir "$work/state" --small-shelf --nvme off --iscsi "127.0.0.1:$port" --grpc "$api" \
  --http off >"$work/stdout" 2>"$work/stratad.log" &
daemon=$!
for _ in $(seq 100); do grep -q "stratad is ready" "$work/stdout" && break; sleep 0.2; done
grep -q "stratad is ready" "$work/stdout" || { cat "$work/stratad.log"; exit 1; }

# Every extent the replay touches starts on the HDDs: capacity affinity
# while they are written, then auto. Cooling off until the cold run.
strata volume update v1 --size 8G --affinity capacity >/dev/null
strata pool update p1 --cold-cooling-seconds 0 >/dev/null
tools/tracereplay/tracereplay.py "$trace" "$url" --prefill-only "${replay_options[@]}" | grep prefill | tee -a "$report"
strata volume update v1 --affinity auto >/dev/null

snapshot() { strata --json volume stats v1 >"$work/$1-volume.json"; strata --json pool stats p1 >"$work/$1-pool.json"; }
replay() {  # NAME
  snapshot "$1-before"
  tools/tracereplay/tracereplay.py "$trace" "$url" --json "${replay_options[@]}" >"$work/$1-replay.json"
  snapshot "$1-after"
}

echo "== warm-up: the touched extents start on the HDD tier" | tee -a "$report"
replay warm
echo "== local: the hot set on the SSD tier, the cold set on the HDDs" | tee -a "$report"
replay local

# The Ceph tier, and every extent of v1 cooled into it (the SSD tier's too).
strata group create c1 --ceph --monitors "$CEPH_MON" --keyring "$CEPH_KEYRING" --rados-pool strata-trace --image p1-cold \
  --size 16G --create-image --pool p1 >/dev/null
strata pool update p1 --cold-cooling-seconds 5 >/dev/null
cooled_at=$(date +%s)
allocated() { strata --json volume stats v1 | python3 -c 'import json,sys; s=json.load(sys.stdin); print(int(s.get("allocated_bytes",0)), int(s.get("cold_bytes",0)))'; }
# Until nothing more goes there for 20 s (what stays is hot).
last=-1 still=0
for _ in $(seq 600); do
  read -r all cold < <(allocated)
  if [ "$cold" = "$last" ]; then still=$((still + 1)); else still=0; last=$cold; fi
  [ "$still" -ge 20 ] && [ "$cold" -gt 0 ] && break
  sleep 1
done
read -r all cold < <(allocated)
echo "== cold: $((cold >> 20)) MiB of v1's $((all >> 20)) MiB in Ceph after $(( $(date +%s) - cooled_at )) s; cooling off for the replay" | tee -a "$report"
[ "$cold" -gt 0 ] || { echo "nothing reached Ceph" | tee -a "$report"; exit 1; }
strata pool update p1 --cold-cooling-seconds 0 >/dev/null
replay cold

python3 - "$work" <<'EOF' | tee -a "$report"
import json, sys
work = sys.argv[1]
def load(name):
    with open(f"{work}/{name}.json") as f:
        return json.load(f)
names = {"performance": "SSD tier", "capacity": "HDD tier", "cold": "Ceph", "cache": "read cache"}
rows = {}
for run in ("local", "cold"):
    r = load(f"{run}-replay")
    vb, va = load(f"{run}-before-volume"), load(f"{run}-after-volume")
    pb, pa = load(f"{run}-before-pool"), load(f"{run}-after-pool")
    bounds = va["latency_bucket_bounds_seconds"]
    before = {t["tier"]: t for t in vb.get("tier_reads", [])}
    tiers = {}
    for t in va.get("tier_reads", []):
        b = before.get(t["tier"], {})
        n = int(t.get("reads", 0)) - int(b.get("reads", 0))
        if n == 0:
            continue
        s = t.get("latency_seconds_sum", 0) - b.get("latency_seconds_sum", 0)
        buckets = [int(x) - int(y) for x, y in zip(t["latency_buckets"], b.get("latency_buckets", [0] * len(t["latency_buckets"])))]
        seen, p99 = 0, bounds[-1]
        for i, c in enumerate(buckets[:-1]):
            seen += c
            if seen >= 0.99 * n:
                p99 = bounds[i]
                break
        tiers[t["tier"]] = (n, 1000 * s / n, 1000 * p99)
    moved = {k: int(pa.get(k, 0)) - int(pb.get(k, 0)) for k in ("migrated_bytes", "promotions", "demotions", "cold_promotions", "cold_demotions")}
    def mean_ms(count, total):
        n = int(va.get(count, 0)) - int(vb.get(count, 0))
        return 1000 * (va.get(total, 0) - vb.get(total, 0)) / n if n else 0
    r["read_ms"] = mean_ms("reads", "read_latency_seconds_sum")
    r["write_ms"] = mean_ms("writes", "write_latency_seconds_sum")
    rows[run] = (r, tiers, moved)
for run, (r, tiers, moved) in rows.items():
    total = sum(n for n, _, _ in tiers.values())
    print(f"\n{run}: {r['ios']} I/Os ({r['reads']} reads) in {r['wall_s']} s: {r['iops']} IOPS, {r.get('mb_per_s', 0)} MB/s, "
          f"{r['errors']} errors; mean latency (the volume's) reads {r['read_ms']:.2f} ms, writes {r['write_ms']:.2f} ms")
    print(f"  {'tier':<12} {'read pieces':>12} {'share':>7} {'mean ms':>9} {'p99 ms (bucket)':>16}")
    for t in ("cache", "performance", "capacity", "cold"):
        if t in tiers:
            n, mean, p99 = tiers[t]
            print(f"  {names[t]:<12} {n:>12} {100 * n / total:>6.1f}% {mean:>9.3f} {p99:>16.2f}")
    print(f"  moved: {moved['migrated_bytes'] / 2**20:.0f} MiB; to the SSD tier {moved['promotions']}, to the HDD tier {moved['demotions']}, "
          f"back from Ceph {moved['cold_promotions']}, to Ceph {moved['cold_demotions']} extents")
(rl, _, _), (rc, _, _) = rows["local"], rows["cold"]
print(f"\ncold set in Ceph against all local, same trace, same run: IOPS {rc['iops'] / rl['iops']:.2f}x, "
      f"mean read latency {rc['read_ms'] / rl['read_ms'] if rl['read_ms'] else 0:.2f}x")
EOF
echo "figures kept in $report"
