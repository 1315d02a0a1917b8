#!/usr/bin/env bash
# The Ceph (cold) tier end to end, with real processes: stratad on a small
# shelf, a single-node Ceph cluster (tools/ceph/single-node.sh, started by
# ctest's fixture and named by $STRATA_TEST_CEPH), qemu-io over iSCSI.
#   1. bad inputs to `strata group create --ceph` (an unreachable monitor,
#      a missing keyring, a key the monitors refuse, a RADOS pool that does
#      not exist, a missing image, an image of the wrong size, an image
#      another client holds): each refused with its reason, nothing changed;
#   2. the tier added to the running pool; its cooling, off at first, set
#      to 5 s on the running pool; data written, cooled and moved to Ceph, read back from there, heated and brought back;
#   3. stratad killed (-9) while moves run: everything reads back after the
#      restart, which takes the image's lock over at once;
#   4. an OSD killed: reads of the extents in Ceph fail with a clear error
#      (ABORTED COMMAND, LU communication timeout) and the group shows
#      UNAVAILABLE with an event, while the rest of the pool serves; the OSD
#      back: they read back.
#   stratad_ceph_test.sh PATH/TO/stratad PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
here=$(cd "$(dirname "$0")" && pwd)
ceph_env=${STRATA_TEST_CEPH:-}
[[ -n "$ceph_env" && -f "$ceph_env" ]] || { echo "FAIL: STRATA_TEST_CEPH names no cluster's env file (ctest's ceph fixture starts one)"; exit 1; }
for tool in qemu-io ceph rbd; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (tools/install-deps.sh installs qemu-utils, ceph-common)"; exit 77; }
done
# shellcheck disable=SC1090
source "$ceph_env"  # CEPH_CONF, CEPH_KEYRING, CEPH_MON, CEPH_DIR
dir=$(mktemp -d)
pid=
image=e2e-$$
trap 'logs_if_failed "$dir/err.log"; kill_all "$pid"; rbd -c "$CEPH_CONF" rm strata-e2e/$image >/dev/null 2>&1; rbd -c "$CEPH_CONF" rm strata-e2e/small-$$ >/dev/null 2>&1; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 12000))
api=127.0.0.1:$((port + 2))
s() { "$cli" --api "$api" "$@"; }
lun="iscsi://127.0.0.1:$port/iqn.2026-11.io.strata:array/0"
io() { qemu-io -f raw "$@" "$lun" 2>&1; }
# pattern OFFSET: the byte written at that offset (one per 4 MiB extent)
pattern() { printf '0x%02x' $(( (($1 >> 22) * 37 + 11) % 251 + 1 )); }
stat_of() { s --json pool stats p1 | python3 -c "import json,sys; print(json.load(sys.stdin).get('$1', 0))"; }
wait_stat() {  # NAME MIN SECONDS
  for _ in $(seq $(($3 * 2))); do (($(stat_of "$1") >= $2)) && return 0; sleep 0.5; done
  return 1
}

ceph -c "$CEPH_CONF" osd pool create strata-e2e 8 >/dev/null 2>&1
rbd -c "$CEPH_CONF" pool init strata-e2e >/dev/null 2>&1

cat >"$dir/strata.toml" <<EOF
[daemon]
state_dir = "array"
iscsi_listen = "127.0.0.1:$port"
grpc_listen = "$api"

[[drive]]
name = "hdd-00"
kind = "hdd"
size = "1G"
[[drive]]
name = "hdd-01"
kind = "hdd"
size = "1G"
[[drive]]
name = "hdd-02"
kind = "hdd"
size = "1G"
[[drive]]
name = "hdd-03"
kind = "hdd"
size = "1G"
[[drive]]
name = "ssd-00"
kind = "ssd"
size = "256M"
[[drive]]
name = "ssd-01"
kind = "ssd"
size = "256M"

[[group]]
name = "g1"
kind = "raid6"
drives = ["hdd-00", "hdd-01", "hdd-02", "hdd-03"]
[[group]]
name = "g2"
kind = "raid1"
drives = ["ssd-00", "ssd-01"]

[pool]
groups = ["g1", "g2"]
cold_cooling_seconds = 0

[[volume]]
name = "db"
size = "1G"

[[host]]
name = "all"
any_initiator = true

[[mapping]]
volume = "db"
host = "all"
lun = 0
EOF
start() {
  "$stratad" --config "$dir/strata.toml" >>"$dir/out.log" 2>>"$dir/err.log" &
  pid=$!
  wait_ready "$dir/out.log" "$dir/err.log"
}
start

echo "== 1. bad inputs: each refused with its reason, nothing changed"
refused() {  # WHAT EXPECTED-TEXT ARGS...
  local what=$1 expected=$2
  shift 2
  local out
  out=$(s group create c1 --ceph --pool p1 "$@" 2>&1)
  local rc=$?
  echo "    $what: $out"
  check "$what: refused, naming it" bash -c '[[ $0 != 0 ]] && grep -qF -- "$1" <<<"$2"' "$rc" "$expected" "$out"
}
good=(--monitors "$CEPH_MON" --keyring "$CEPH_KEYRING" --rados-pool strata-e2e)
refused "an unreachable monitor" "no monitor answered" --monitors "127.0.0.1:1" --keyring "$CEPH_KEYRING" \
  --rados-pool strata-e2e --image "$image" --size 1G --create-image
refused "a keyring file that does not exist" "cannot read the cephx keyring $dir/none" --monitors "$CEPH_MON" \
  --keyring "$dir/none" --rados-pool strata-e2e --image "$image" --size 1G --create-image
printf '[client.admin]\n\tkey = AQBvSkVnAAAAABAAk1ZAUn0zGVXH0KEwnGmwkA==\n' >"$dir/wrong.keyring"
refused "a key the monitors refuse" "refused client.admin's key" --monitors "$CEPH_MON" --keyring "$dir/wrong.keyring" \
  --rados-pool strata-e2e --image "$image" --size 1G --create-image
refused "a RADOS pool that does not exist" "the RADOS pool no-such-pool does not exist" --monitors "$CEPH_MON" \
  --keyring "$CEPH_KEYRING" --rados-pool no-such-pool --image "$image" --size 1G --create-image
refused "an image that does not exist" "the RBD image strata-e2e/$image does not exist" "${good[@]}" --image "$image" --size 1G
rbd -c "$CEPH_CONF" create --size 64M "strata-e2e/small-$$"
refused "an image of another size" "is 67108864 bytes, not the 1073741824 expected" "${good[@]}" --image "small-$$" --size 1G
refused "a size that is not whole extents" "not a positive multiple of the 4 MiB extent" "${good[@]}" --image "$image" --size 5M --create-image
check "no group c1, and p1 is as it was" bash -c '! "$0" --api "$1" group list | grep -q c1 && "$0" --api "$1" pool show p1 | grep -q "groups/g1,groups/g2 "' "$cli" "$api"
check "no image was made" bash -c '! rbd -c "$0" info "strata-e2e/$1" >/dev/null 2>&1' "$CEPH_CONF" "$image"

echo "== 2. the Ceph tier added to the running pool; data cools into it, reads back, heats and comes back"
# Data on the local tiers first: written before the tier exists.
for e in 0 3 9 17 40 100; do
  off=$((e << 22))
  io -c "write -P $(pattern $off) $off 4M" >/dev/null
done
check "strata group create c1 --ceph --pool p1" quiet s group create c1 --ceph "${good[@]}" --image "$image" --size 1G --create-image --pool p1
s group show c1
check "c1 is CEPH, OPTIMAL, its cluster HEALTH_OK" bash -c '"$0" --api "$1" group show c1 | grep -E "CEPH +OPTIMAL .*HEALTH_OK"' "$cli" "$api"
check "c1 shows what its RADOS pool has left (ceph df), and the pool's free Ceph space is no more than that" within 15 bash -c '"$0" --api "$1" --json group show c1 | python3 -c "
import json,subprocess,sys
g = json.load(sys.stdin)[\"ceph\"]
left = int(g.get(\"rados_pool_available_bytes\", 0))
p = json.loads(subprocess.run([sys.argv[1], \"--api\", sys.argv[2], \"--json\", \"pool\", \"stats\", \"p1\"], capture_output=True, text=True).stdout)
sys.exit(not (0 < left and int(p.get(\"cold_free_bytes\", 0)) <= left))" "$0" "$1"' "$cli" "$api"
check "p1's groups: g1, g2, c1" bash -c '"$0" --api "$1" pool show p1 | grep -q "groups/g1,groups/g2,groups/c1"' "$cli" "$api"
# Cooling off (the config file's 0): nothing moves until it is set.
sleep 6
check "with cooling off, nothing moved to Ceph" test "$(stat_of cold_demotions)" = 0
check "a cooling over 100 years is refused, saying why" bash -c '"$0" --api "$1" pool update p1 --cold-cooling-seconds 99999999999 2>&1 | grep -q "more than 3153600000 (100 years)"' "$cli" "$api"
check "strata pool update p1 --cold-cooling-seconds 5" quiet s pool update p1 --cold-cooling-seconds 5
check "p1 shows cooling 5s" bash -c '"$0" --api "$1" pool show p1 | grep -qE " 5s *$"' "$cli" "$api"
check "the six extents move to Ceph (cooling 5 s)" wait_stat cold_demotions 6 90
s pool stats p1 | cut -c1-120
verify() {  # the patterns of every extent written read back
  local e off bad=0
  for e in "$@"; do
    off=$((e << 22))
    io -c "read -P $(pattern $off) $off 4M" | grep -q "read 4194304/4194304" || { echo "    extent $e does not read back"; bad=1; }
  done
  return $bad
}
check "they read back from Ceph" verify 0 3 9 17 40 100
check "the volume counts those reads as Ceph's, with their latency" bash -c '"$0" --api "$1" --json volume stats db | python3 -c "
import json,sys
t = {r[\"tier\"]: r for r in json.load(sys.stdin).get(\"tier_reads\", [])}
c = t.get(\"cold\", {})
sys.exit(not (int(c.get(\"reads\", 0)) >= 6 and float(c.get(\"latency_seconds_sum\", 0)) > 0))"' "$cli" "$api"
check "the volume's bytes in Ceph: 24 MiB" bash -c '"$0" --api "$1" --json volume stats db | python3 -c "import json,sys; sys.exit(json.load(sys.stdin).get(\"cold_bytes\") != \"25165824\")"' "$cli" "$api"
# Extent 3 turns hot: random 4 KiB reads.
for i in $(seq 0 11); do io -c "read -P $(pattern $((3 << 22))) $(( (3 << 22) + ((i * 7) % 64) * 65536 )) 4k" >/dev/null; done
check "the hot extent comes back from Ceph" wait_stat cold_promotions 1 30
check "and reads back" verify 3

echo "== 3. kill -9 while moves run; the restart takes the image's lock over"
batch=$(seq 50 73)
for e in $batch; do
  off=$((e << 22))
  io -c "write -P $(pattern $off) $off 4M" >/dev/null
done
# The kill comes as soon as the batch's first move is done: the rest run
# (or wait their turn) then. A sample of moves_in_flight alone missed them
# under load (moves are short), so the count of moves done is the signal.
before=$(stat_of cold_demotions)
moving=0 done_before_kill=0
for _ in $(seq 600); do
  read -r moving done_before_kill < <(s --json pool stats p1 | python3 -c "
import json,sys; d=json.load(sys.stdin); print(d.get('moves_in_flight', 0), int(d.get('cold_demotions', 0)) - $before)")
  ((done_before_kill >= 1)) && break
done
kill -9 "$pid"; wait "$pid" 2>/dev/null
echo "    killed with $moving move(s) in flight, $done_before_kill of the batch's 24 done"
check "the kill came in the middle of the batch's moves" test "$done_before_kill" -ge 1 -a "$done_before_kill" -lt 24
started=$(date +%s.%N)
start
connected=0
for _ in $(seq 60); do s group show c1 | grep -q "CEPH *OPTIMAL" && { connected=1; break; }; sleep 0.5; done
check "c1 opens again in the background (OPTIMAL)" test "$connected" = 1
echo "    c1 open $(python3 -c "import time; print(round(time.time() - $started, 1))") s after the start"
check "everything reads back after the restart" verify 0 3 9 17 40 100 $batch
volume_cold() { s --json volume stats db | python3 -c "import json,sys; print(int(json.load(sys.stdin).get('cold_bytes', 0)) >> 22)"; }
all_cold=0
# The batch and five of the first six (extent 3, heated, may follow them:
# a heat the kill took with it is relearned, not kept).
for _ in $(seq 120); do (($(volume_cold) >= 29)) && { all_cold=1; break; }; sleep 0.5; done
echo "    $(volume_cold) of the volume's extents in Ceph $(python3 -c "import time; print(round(time.time() - $started))") s after the restart"
check "the moves go on (the image's lock taken over, not waited out): 29 or more extents in Ceph" test "$all_cold" = 1
check "verified again, from Ceph" verify $batch

echo "== 4. an OSD dies: the extents in Ceph fail with a clear error; the rest serves; it comes back"
io -c "write -P 0x42 $((200 << 22)) 4M" >/dev/null  # a fresh extent, on the local tiers
"$here/../../tools/ceph/single-node.sh" osd-stop "$CEPH_DIR" 0
io -c "read -P $(pattern $((9 << 22))) $((9 << 22)) 4k" >"$dir/cold-read.log" &
cold_read=$!
sleep 2
check "a local extent reads at once meanwhile" bash -c 'timeout 10 qemu-io -f raw -c "read -P 0x42 $0 4M" "$1" | grep -q "read 4194304"' "$((200 << 22))" "$lun"
timeout 10 qemu-io -f raw -c "write -P 0x43 $((220 << 22)) 4M" "$lun" >"$dir/new-write.log" 2>&1
sed 's/^/    new extent: /' "$dir/new-write.log"
check "and a new one is written" grep -q "wrote 4194304" "$dir/new-write.log"
wait "$cold_read"
cat "$dir/cold-read.log" | sed 's/^/    /'
check "the read of an extent in Ceph fails: ABORTED COMMAND, LU communication timeout" grep -q "COMMAND ABORTED.*0x0801" "$dir/cold-read.log"
s group show c1
check "c1 shows UNAVAILABLE" bash -c '"$0" --api "$1" group show c1 | grep -q UNAVAILABLE' "$cli" "$api"
check "an event says so" bash -c '"$0" --api "$1" events | grep -q "groups/c1 .*unavailable to pools/p1"' "$cli" "$api"
"$here/../../tools/ceph/single-node.sh" osd-start "$CEPH_DIR" 0
back=0
for _ in $(seq 60); do verify 9 >/dev/null 2>&1 && { back=1; break; }; sleep 1; done
check "the OSD back: the extent in Ceph reads again" test "$back" = 1
check "everything reads back" verify 0 3 9 17 40 50 51 52 53 54 55 56 57 100
check "stratad is still running" kill -0 "$pid"
exit "$failed"
