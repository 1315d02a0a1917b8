#!/usr/bin/env bash
# Takeover, failback and fencing with real processes and a real initiator
# (README.md, "Two controllers"): controller a owns the pool and mirrors
# its metadata to b; a killed with -9 is taken over by b, which serves
# every acknowledged write; a restarted gets its pool back (failback);
# a frozen a (SIGSTOP) is taken over too, and once thawed finds the newer
# epoch on the drives, steps down, and writes nothing: the write a host
# queued on it while it was frozen never lands over what b wrote since;
# 64 writes in flight at a kill -9 land as whole blocks or not at all.
# The drives keep unflushed writes in each process's memory
# (--volatile-drive-caches): a kill -9 loses what a power cut would.
# Writes go several at once (qemu-io's aio_write), then a flush.
#   stratad_takeover_test.sh PATH/TO/stratad PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
command -v qemu-io >/dev/null || { echo "SKIP: qemu-io is missing (tools/install-deps.sh installs qemu-utils, qemu-block-extra)"; exit 77; }
dir=$(mktemp -d); echo "state in $dir"
pid=
pid_b=
stale=
writer=
trap 'logs_if_failed "$dir/a.err" "$dir/b.err" "$dir/io.out" "$dir/stale.out"; kill_all "$writer" "$pid" "$pid_b" "${saved:-}" "$stale"; [[ -n "${KEEP:-}" ]] || rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 12000))
api_a=127.0.0.1:$((port + 2))
api_b=127.0.0.2:$((port + 2))
link=127.0.0.2:$((port + 5))
lun=iqn.2026-11.io.strata:array/0
on_a=iscsi://127.0.0.1:$port/$lun
on_b=iscsi://127.0.0.2:$port/$lun

start_a() {
  "$stratad" --small-shelf --volatile-drive-caches --state-dir "$dir/a" --shelf "$dir/shelf" --iscsi 127.0.0.1:$port --grpc "$api_a" \
    --partner-link "$link" >"$dir/a.out" 2>"$dir/a.err" &
  pid=$!
  wait_ready "$dir/a.out" "$dir/a.err"
}
start_b() {
  "$stratad" --controller b --volatile-drive-caches --state-dir "$dir/b" --shelf "$dir/shelf" --iscsi 127.0.0.2:$port --grpc "$api_b" \
    --partner-link "$link" >"$dir/b.out" 2>"$dir/b.err" &
  pid_b=$!
  saved=$pid
  pid=$pid_b
  wait_ready "$dir/b.out" "$dir/b.err"
  pid=$saved
  saved=
}
# write URL BYTE OFFSET_MIB: 4 MiB at OFFSET as four 1 MiB writes in flight at once, then a flush
write4() {
  local o=$(($3 * 1048576))
  qemu-io -f raw -c "aio_write -P $2 $o 1M" -c "aio_write -P $2 $((o + 1048576)) 1M" -c "aio_write -P $2 $((o + 2097152)) 1M" \
    -c "aio_write -P $2 $((o + 3145728)) 1M" -c "aio_flush" -c flush "$1" >"$dir/io.out" 2>&1 && ! grep -qi "error\|fail" "$dir/io.out"
}
# holds URL BYTE OFFSET_MIB LENGTH_MIB: those MiB hold BYTE
holds() { qemu-io -f raw -c "read -P $2 $(($3 * 1048576)) $4M" "$1" >"$dir/io.out" 2>&1 && ! grep -qi "error\|fail\|mismatch" "$dir/io.out"; }
# events_say API TEXT SECONDS: polls the event log for TEXT
events_say() {
  for _ in $(seq $(($3 * 10))); do "$cli" --api "$1" events --limit 1000 2>/dev/null | grep -q "$2" && return 0; sleep 0.1; done
  return 1
}
# events_count API TEXT N SECONDS: polls until TEXT is in the event log N times
events_count() {
  for _ in $(seq $(($4 * 10))); do [[ $("$cli" --api "$1" events --limit 1000 2>/dev/null | grep -c "$2") -ge $3 ]] && return 0; sleep 0.1; done
  return 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

start_a
start_b
check "b holds a current copy of the pool's metadata (a says so on the drives)" events_say "$api_a" "controller b holds a current copy of its metadata" 10
# Pool p2's home is b: a hands it over once b's copy is current. Waited
# for, so that the kill -9 below finds a owning p1 alone, under any load.
check "a handed pool p2 over to b, its home" events_say "$api_a" "pools/p2 .*handed over to controller b, its home, in" 30
check "four writes at once through a, flushed" write4 "$on_a" 0xa1 0
check "more, overlapping the first by 2 MiB" write4 "$on_a" 0xa2 2
check "and 4 MiB past the first 16" write4 "$on_a" 0xa2 16

# inflight URL: 64 writes of 256 KiB at once over the first 16 MiB, write i
# of byte 0x40+i at i * 256 KiB, in the background (into $dir/inflight.out)
inflight() {
  local cmds=()
  for i in $(seq 0 63); do cmds+=(-c "aio_write -P $((0x40 + i)) $((i * 262144)) 256k"); done
  stdbuf -o0 qemu-io -f raw "${cmds[@]}" -c aio_flush "$1" >"$dir/inflight.out" 2>&1 &
  writer=$!
}
# whole_blocks URL OLD_HEX...: every 4 KiB block of the first 16 MiB holds one
# byte throughout: its write's (0x40+i) or one of the OLD bytes given per MiB
# (MiB m holds OLD[m]): a write cut by the kill lands whole blocks or none,
# and nothing else is ever read
whole_blocks() {
  local url=$1; shift
  qemu-img dd -f raw -O raw bs=1M count=16 if="$url" of="$dir/first16" >/dev/null 2>&1 || return 1
  python3 - "$dir/first16" "$@" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read()
old = [int(x, 16) for x in sys.argv[2:]]
bad = 0
for block in range(len(data) // 4096):
    b = data[block * 4096:(block + 1) * 4096]
    mib = block // 256
    allowed = {0x40 + block // 64, old[mib] if mib < len(old) else 0}
    if b != bytes([b[0]]) * 4096 or b[0] not in allowed:
        bad += 1
        if bad <= 3:
            print(f"block {block}: starts {b[:8].hex()}, expected one of {sorted(allowed)}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# kill -9 of the owner, with 64 writes in flight: b takes the pool over
# from its copy and the drives.
inflight "$on_a"
for _ in $(seq 500); do grep -q "^wrote" "$dir/inflight.out" 2>/dev/null && break; sleep 0.005; done  # the first is acknowledged
t0=$(now_ms)
kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
kill -9 "$writer" 2>/dev/null; wait "$writer" 2>/dev/null  # a host whose only path died (it would retry it for ever)
writer=
echo "at the kill, $(grep -c '^wrote' "$dir/inflight.out") of the 64 writes in flight had been acknowledged"
served=
for _ in $(seq 200); do holds "$on_b" 0xa2 16 1 && { served=$(($(now_ms) - t0)); break; }; sleep 0.05; done
echo "b served the pool $served ms after a's kill -9"
check "b serves the pool within 10 s of a's kill -9" test -n "$served" -a "${served:-99999}" -le 10000
# Before the kill, MiB 0-1 held 0xa1, 2-5 0xa2, 6-15 nothing written (zeros).
check "after the kill, the 64 writes in flight landed as whole blocks or not at all: nothing else is read" \
  whole_blocks "$on_b" a1 a1 a2 a2 a2 a2 0 0 0 0 0 0 0 0 0 0
check "every write a acknowledged beyond them is there on b" holds "$on_b" 0xa2 16 4
check "b's event log: taken over, with a new epoch" events_say "$api_b" "taken over from controller a (epoch 2)" 1
check "b lists itself as the pool's owner" bash -c "'$cli' --api $api_b controller list | grep controllers/b | grep -q pools/p1"
check "b takes writes for it" write4 "$on_b" 0xb1 4

# a back: it serves nothing it lost, catches up, and gets its pool back.
start_a
check "a, restarted, leaves the pool to b at first (the drives say b owns it)" grep -q "pools/p1: served by controller b" "$dir/a.err"
check "b hands the pool back once a holds a current copy" events_say "$api_b" "handed over to controller a, its home, in" 30
took=$("$cli" --api "$api_b" events | sed -n 's/.*handed over to controller a, its home, in \([0-9]*\) ms.*/\1/p' | head -1)
echo "failback: the pool paused for $took ms"
check "failback pauses the pool under 2 s" test "${took:-99999}" -le 2000
check "a serves every write, its own and b's" bash -c "$(declare -f holds); dir=$dir; holds $on_a 0xa2 16 4 && holds $on_a 0xb1 4 4"
check "both controllers' records say a owns it, epoch 3" bash -c \
  "'$cli' --api $api_a controller list | grep controllers/a | grep -q pools/p1 && '$cli' --api $api_b controller list | grep controllers/a | grep -q pools/p1"

# A planned failover through b's API (b hands the change to a), and back through a's.
# v1 writes through (its own mode, its pool writing back): so it must on
# whichever controller serves it (issue 48, finding 9: the mode was
# applied at start-up only, and lost at a change of owner).
wcache_of() { "$cli" --api "$1" --json volume stats v1 | python3 -c "import json,sys; print(json.load(sys.stdin).get('write_cache', ''))"; }
check "v1 set to write-through on a" quiet "$cli" --api "$api_a" volume update v1 --write-cache write-through
check "... its statistics on a say so" test "$(wcache_of "$api_a")" = write-through
check "strata pool move p1 --to b --wait: the operation ends once b serves it" bash -c "'$cli' --api $api_b pool move p1 --to b --wait | grep -q SUCCEEDED"
check "... v1 writes through on b too ($(wcache_of "$api_b"))" test "$(wcache_of "$api_b")" = write-through
check "... and back to write-back" quiet "$cli" --api "$api_b" volume update v1 --write-cache write-back
check "... and both controllers' records say b owns it" bash -c \
  "'$cli' --api $api_a controller list | grep controllers/b | grep -q pools/p1 && '$cli' --api $api_b controller list | grep controllers/b | grep -q pools/p1"
check "b serves it, with every write" bash -c "$(declare -f holds); dir=$dir; holds $on_b 0xa2 16 4 && holds $on_b 0xb1 4 4"
check "a's event log: handed over to b, its home now" events_say "$api_a" "handed over to controller b, its home, in" 5
took=$("$cli" --api "$api_a" events | sed -n 's/.*handed over to controller b, its home, in \([0-9]*\) ms.*/\1/p' | head -1)
echo "planned failover: the pool paused for $took ms"
check "a planned failover pauses the pool under 2 s" test "${took:-99999}" -le 2000
check "a move to where it is ends at once" bash -c "'$cli' --api $api_a pool move p1 --to b --wait | grep -q SUCCEEDED"
check "a move to controller c is refused, naming the field" bash -c "'$cli' --api $api_a pool move p1 --to c 2>&1 | grep -q 'INVALID_ARGUMENT: to'"
copies=$("$cli" --api "$api_a" events --limit 1000 | grep -c "pools/p1 .*controller b holds a current copy of its metadata")
check "strata pool move p1 --to a: back (failback by command)" bash -c "'$cli' --api $api_a pool move p1 --to a --wait | grep -q SUCCEEDED"
check "a serves it again" bash -c "$(declare -f holds); dir=$dir; holds $on_a 0xb1 4 4"

# a frozen: b takes over; a, thawed, is fenced and steps down.
check "a mirrors the pool to b again (its drives say b's copy is current)" \
  events_count "$api_a" "pools/p1 .*controller b holds a current copy of its metadata" $((copies + 1)) 10
check "a write through a before it freezes" write4 "$on_a" 0xc1 0
kill -STOP "$pid"
# A host's write queued on the frozen a, by a host that then gives up on
# it (it goes away before a thaws): it must never land. (A host that stays
# sends it again once the thawed a resets its connection, as qemu's iSCSI
# driver does; that copy is the host's new command, and lands through b.)
qemu-io -f raw -c "write -P 0xee 0 1M" -c flush "$on_a" >"$dir/stale.out" 2>&1 &
stale=$!
check "b takes the pool over from the frozen a" events_count "$api_b" "pools/p1 .*taken over from controller a (epoch" 2 15
check "b takes writes over the same blocks" write4 "$on_b" 0xd1 0
kill -9 "$stale" 2>/dev/null; wait "$stale" 2>/dev/null; stale=
kill -CONT "$pid"
check "a, thawed, finds the newer epoch and steps down" events_say "$api_a" "while this controller was frozen: it stepped down" 15
sleep 1
check "what b wrote since stands: the frozen a's queued write never landed" holds "$on_b" 0xd1 0 4
check "every earlier acknowledged write is there too" holds "$on_b" 0xb1 4 4
# Every view of ownership agrees, on either controller (issue 47): p1 is
# b's in GetPool and in ListControllers, and a says it stepped down.
# owner_on API POOL: the pool's owner as that controller's API says
owner_on() { "$cli" --api "$1" --json pool list | grep -o "\"name\":\"pools/$2\"[^}]*\"owner\":\"[^\"]*\"" | sed 's/.*"owner":"//; s/"$//'; }
# holders API POOL: the controllers whose pools include POOL in that API's controller list
holders() { "$cli" --api "$1" --json controller list | python3 -c '
import json, sys
print(" ".join(sorted(c["name"] for c in json.load(sys.stdin) if sys.argv[1] in c.get("pools", []))))' "pools/$2"; }
state_on() { "$cli" --api "$1" --json controller list | python3 -c '
import json, sys
print([c["state"] for c in json.load(sys.stdin) if c["name"] == sys.argv[1]][0])' "controllers/$2"; }
for api in "$api_a" "$api_b"; do
  check "GetPool on $api: p1's owner is controllers/b ($(owner_on "$api" p1))" test "$(owner_on "$api" p1)" = controllers/b
  check "ListControllers on $api: p1 is b's pool alone ($(holders "$api" p1))" test "$(holders "$api" p1)" = controllers/b
  check "ListControllers on $api: a says it stepped down ($(state_on "$api" a))" test "$(state_on "$api" a)" = CONTROLLER_STEPPED_DOWN
done
check "b's event log shows every transition" bash -c "'$cli' --api $api_b events --limit 1000 | grep -q 'controller a is DOWN: taking the pool over'"

kill -TERM "$pid"; wait "$pid"
check "a (stepped down) stops cleanly" test $? = 0
pid=
kill -TERM "$pid_b"; wait "$pid_b"
check "b stops cleanly" test $? = 0
pid_b=
exit $failed
