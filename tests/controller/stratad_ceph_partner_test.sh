#!/usr/bin/env bash
# A pool with a Ceph (cold) tier on two controllers, with real processes:
# the single-node cluster of ctest's ceph fixture ($STRATA_TEST_CEPH),
# controllers a and b on one small shelf, qemu-io over iSCSI.
#   1. a Ceph group added to a's pool p1 through b's API (forwarded to a);
#      data cools into it;
#   2. a planned move of p1 to b: a closes the image (its lock released),
#      b opens it and serves every extent, those in Ceph too, and moves go
#      on there;
#   3. b killed (-9): a takes p1 over, breaks b's lock on the image (the
#      OSDs blocklist b's client), and serves everything.
#   stratad_ceph_partner_test.sh PATH/TO/stratad PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
ceph_env=${STRATA_TEST_CEPH:-}
[[ -n "$ceph_env" && -f "$ceph_env" ]] || { echo "FAIL: STRATA_TEST_CEPH names no cluster's env file (ctest's ceph fixture starts one)"; exit 1; }
for tool in qemu-io ceph rbd; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (tools/install-deps.sh installs qemu-utils, ceph-common)"; exit 77; }
done
# shellcheck disable=SC1090
source "$ceph_env"  # CEPH_CONF, CEPH_KEYRING, CEPH_MON, CEPH_DIR
dir=$(mktemp -d)
pid=
pid_b=
image=partner-$$
mon_pid=
trap '[[ -n "$mon_pid" ]] && kill -CONT "$mon_pid"; logs_if_failed "$dir/a.err" "$dir/b.err"; kill_all "$pid" "$pid_b"; rbd -c "$CEPH_CONF" rm strata-e2e/$image >/dev/null 2>&1; [[ -n "${KEEP:-}" ]] || rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 12000))
api_a=127.0.0.1:$((port + 2))
api_b=127.0.0.2:$((port + 2))
link=127.0.0.2:$((port + 5))
lun=iqn.2026-11.io.strata:array/0
on_a=iscsi://127.0.0.1:$port/$lun
on_b=iscsi://127.0.0.2:$port/$lun
# pattern OFFSET: the byte written at that offset (one per 4 MiB extent)
pattern() { printf '0x%02x' $(( (($1 >> 22) * 41 + 7) % 251 + 1 )); }
extents=(0 2 5 9 14 20)
write_all() { for e in "${extents[@]}"; do qemu-io -f raw -c "write -P $(pattern $((e << 22))) $((e << 22)) 4M" "$1" >/dev/null 2>&1 || return 1; done; }
verify() {  # URL: every extent written reads back
  local e bad=0
  for e in "${extents[@]}"; do
    qemu-io -f raw -c "read -P $(pattern $((e << 22))) $((e << 22)) 4M" "$1" 2>&1 | grep -q "read 4194304/4194304" || { echo "    extent $e does not read back"; bad=1; }
  done
  return $bad
}
cold_at_least() {  # API N: p1's volume v1 has N extents or more in Ceph
  local n
  n=$("$cli" --api "$1" --json volume stats pools/p1/volumes/v1 2>/dev/null |
    python3 -c "import json,sys; print(int(json.load(sys.stdin).get('cold_bytes', 0)) >> 22)" 2>/dev/null) || return 1
  (( ${n:-0} >= $2 ))
}
blocklisted() { ceph -c "$CEPH_CONF" osd blocklist ls 2>/dev/null | grep -c "^[0-9]"; }
events_say() {  # API TEXT SECONDS
  for _ in $(seq $(($3 * 10))); do "$cli" --api "$1" events --limit 1000 2>/dev/null | grep -q "$2" && return 0; sleep 0.1; done
  return 1
}

start_a() {
  "$stratad" --small-shelf --state-dir "$dir/a" --shelf "$dir/shelf" --iscsi 127.0.0.1:$port --grpc "$api_a" \
    --partner-link "$link" >"$dir/a.out" 2>"$dir/a.err" &
  pid=$!
  wait_ready "$dir/a.out" "$dir/a.err"
}
start_b() {
  "$stratad" --controller b --state-dir "$dir/b" --shelf "$dir/shelf" --iscsi 127.0.0.2:$port --grpc "$api_b" \
    --partner-link "$link" >"$dir/b.out" 2>"$dir/b.err" &
  pid_b=$!
  local saved=$pid
  pid=$pid_b
  wait_ready "$dir/b.out" "$dir/b.err"
  pid=$saved
}

ceph -c "$CEPH_CONF" osd pool create strata-e2e 8 >/dev/null 2>&1
rbd -c "$CEPH_CONF" pool init strata-e2e >/dev/null 2>&1
start_a
start_b
check "b holds a current copy of p1's metadata" events_say "$api_a" "pools/p1 .*controller b holds a current copy of its metadata" 30

echo "== 1. a Ceph tier for p1 (a's), added through b's API; data cools into it"
check "the extents written through a" write_all "$on_a"
check "strata group create c1 --ceph --pool p1, through b" quiet "$cli" --api "$api_b" group create c1 --ceph --monitors "$CEPH_MON" \
  --keyring "$CEPH_KEYRING" --rados-pool strata-e2e --image "$image" --size 1G --create-image --pool p1
check "cooling 2 s, through b" quiet "$cli" --api "$api_b" pool update p1 --cold-cooling-seconds 2
check "the six extents reach Ceph" within 60 cold_at_least "$api_a" 6
check "they read back through a" verify "$on_a"

echo "== 2. a planned move of p1 to b: the image changes hands with its lock"
fenced_before=$(blocklisted)
check "strata pool move p1 --to b --wait" bash -c "'$cli' --api $api_a pool move p1 --to b --wait | grep -q SUCCEEDED"
check "b's c1 is OPTIMAL (the image open there)" within 30 bash -c "'$cli' --api $api_b group show c1 | grep -qE 'CEPH +OPTIMAL'"
check "a closed its image: its lock was released, not broken (no client blocklisted for it)" test "$(blocklisted)" = "$fenced_before"
check "everything reads back through b, the extents in Ceph too" verify "$on_b"
check "b moves on: heated, an extent comes back from Ceph" bash -c "
  for i in \$(seq 0 11); do qemu-io -f raw -c \"read \$(( (i * 7 % 64) * 65536 )) 4k\" '$on_b' >/dev/null 2>&1; done
  for _ in \$(seq 60); do
    n=\$('$cli' --api $api_b --json pool stats p1 | python3 -c 'import json,sys; print(json.load(sys.stdin).get(\"cold_promotions\", 0))')
    (( n >= 1 )) && exit 0; sleep 0.5
  done; exit 1"

echo "== 3. b killed (-9): a takes p1 over, breaking b's lock"
kill -9 "$pid_b"; wait "$pid_b" 2>/dev/null; pid_b=
check "a takes p1 over" events_say "$api_a" "pools/p1 .*taken over from controller b" 30
check "a's c1 is OPTIMAL: the lock taken over" within 30 bash -c "'$cli' --api $api_a group show c1 | grep -qE 'CEPH +OPTIMAL'"
check "b's client is blocklisted (fenced at the OSDs)" test "$(blocklisted)" -gt "$fenced_before"
check "everything reads back through a" verify "$on_a"
check "writes to extents in Ceph go through a" bash -c "qemu-io -f raw -c 'write -P 0x5a $((9 << 22)) 4k' -c flush '$on_a' 2>&1 | grep -q 'wrote 4096/4096'"
check "... and read back" bash -c "qemu-io -f raw -c 'read -P 0x5a $((9 << 22)) 4k' '$on_a' 2>&1 | grep -q 'read 4096/4096'"
check "... and the extent's own pattern again" bash -c "qemu-io -f raw -c 'write -P $(pattern $((9 << 22))) $((9 << 22)) 4k' -c flush '$on_a' 2>&1 | grep -q 'wrote 4096/4096'"

echo "== 4. the monitor partitioned while a's status thread asks it: p1 handed back to b"
# p1's home is b since the move above: restarted, b gets it back from a
# once its copy is current. The monitor is stopped first, and a's status
# thread asks it every 10 s: by 11 s, its query waits (up to op_timeout,
# 30 s), when a lets go of the image.
mon_pid=$(cat "$CEPH_DIR"/run/mon.*.pid 2>/dev/null | head -1)
check "the monitor's pid is known" test -n "$mon_pid"
[[ -n "$mon_pid" ]] && kill -STOP "$mon_pid"
sleep 11
# handed: how long each of a's hand-overs of p1 to b paused it (ms), a line each
handed() { "$cli" --api "$api_a" events --limit 1000 2>/dev/null | sed -n 's/.*pools\/p1 .*handed over to controller b, its home, in \([0-9]*\) ms.*/\1/p' | sort; }
before=$(handed)
start_b
handed_again() { [[ $(handed | wc -l) -gt $(grep -c . <<<"$before") ]]; }
check "a hands p1 back to b, its home, the monitor stopped" within 60 handed_again
took=$(comm -13 <(echo "$before") <(handed) | head -1)  # the new one
echo "the hand-over paused p1 for ${took:-?} ms with the monitor stopped"
check "... under 2 s: a's loop never waited for the status query" test "${took:-99999}" -le 2000
check "b never found a DOWN: a beat throughout" bash -c "! '$cli' --api $api_b events --limit 1000 | grep -q 'controller a is DOWN'"
check "a's API answers while its status thread still waits" timeout 5 "$cli" --api "$api_a" controller list
[[ -n "$mon_pid" ]] && kill -CONT "$mon_pid"
mon_pid=
check "the monitor back, b's c1 is OPTIMAL (it opened the image a let go)" within 60 bash -c "'$cli' --api $api_b group show c1 | grep -qE 'CEPH +OPTIMAL'"
check "everything reads back through b" verify "$on_b"

kill -TERM "$pid_b"; wait "$pid_b"
check "b stops cleanly" test $? = 0
pid_b=
kill -TERM "$pid"; wait "$pid"
check "a stops cleanly (its status thread let go: it stops within the test's time)" test $? = 0
pid=
exit $failed
