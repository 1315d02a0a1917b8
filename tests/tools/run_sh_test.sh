#!/usr/bin/env bash
# tools/run.sh as a new user runs it (README.md): both controllers of the
# embedded default on their fixed addresses, in a fresh state directory.
# A write through a's portal (LUN 0, pool p1: a's), kill -9 of controller
# a: the data reads back through b's portal within 10 s, run.sh restarts
# a once b has taken p1 over, and p1 fails back to a, whose portal serves
# the data again. Four more kills: at the fifth death run.sh stops both and
# exits 1. Started again, the same array comes up, and Ctrl-C (SIGINT) of
# run.sh stops both, cleanly.
#   run_sh_test.sh PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/../controller/lib.sh"
cli=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v qemu-io >/dev/null || { echo "SKIP: qemu-io is missing (tools/install-deps.sh installs qemu-utils, qemu-block-extra)"; exit 77; }
dir=$(mktemp -d); echo "state in $dir"
run=
trap 'logs_if_failed "$dir/run.err"; [[ -n "$run" ]] && kill -INT "$run" 2>/dev/null; sleep 1; pkill -9 -f "stratad[ ].*--state-dir $dir/" 2>/dev/null; [[ -n "${KEEP:-}" ]] || rm -rf "$dir"' EXIT
lun=iqn.2026-11.io.strata:array/0
on_a=iscsi://127.0.0.1:3260/$lun
on_b=iscsi://127.0.0.2:3260/$lun

# Job control on: run.sh gets its own process group, and SIGINT reaches it
# as Ctrl-C does (a script's background job otherwise ignores SIGINT).
set -m
"$root/tools/run.sh" --state-dir "$dir" >"$dir/run.out" 2>"$dir/run.err" &
run=$!
set +m
# owner POOL: the pool's owner, as controller b's API says
owner() { "$cli" --api 127.0.0.2:50051 --json pool list 2>/dev/null | grep -o "\"name\":\"pools/$1\"[^}]*\"owner\":\"[^\"]*\"" | sed 's/.*"owner":"//; s/"$//'; }
owned_by() { [[ "$(owner "$1")" == "controllers/$2" ]]; }
# (The patterns' "[ ]" keeps pgrep from finding a shell whose own command line holds the pattern.)
a_pid() { pgrep -f "stratad[ ]--state-dir $dir/a " | head -1; }
check "tools/run.sh starts both controllers, and b gets its pool p2 (within 240 s)" within 240 owned_by p2 b
check "... p1 is a's" owned_by p1 a
write() { qemu-io -f raw -c "aio_write -P $2 0 1M" -c "aio_write -P $2 1M 1M" -c aio_flush -c flush "$1" >"$dir/io.out" 2>&1 && ! grep -qi "error\|fail" "$dir/io.out"; }
holds() { qemu-io -f raw -c "read -P $2 0 2M" "$1" >"$dir/io.out" 2>&1 && ! grep -qi "error\|fail\|mismatch" "$dir/io.out"; }
check "2 MiB written and flushed through a's portal (LUN 0, p1)" write "$on_a" 0x5c
pid_a=$(a_pid)
check "controller a's process is found" test -n "$pid_a"
kill -9 "$pid_a"
killed=$(date +%s%N)
check "after kill -9 of a, the data reads back through b's portal within 10 s" within 10 holds "$on_b" 0x5c
echo "  read back through b $(( ($(date +%s%N) - killed) / 1000000 )) ms after the kill"
check "... run.sh and controller b still run" kill -0 "$run"
check "... and b owns p1 (a takeover)" within 30 owned_by p1 b
restarted() { local now; now=$(a_pid); [[ -n "$now" && "$now" != "$pid_a" ]]; }
check "run.sh restarts a (within 90 s of the kill)" within 90 restarted
check "... and says why" grep -q "controller a stopped (status 137): b takes its pools over" "$dir/run.err"
check "p1 fails back to a (within 180 s)" within 180 owned_by p1 a
check "... and a's portal serves what was written before the kill" within 20 holds "$on_a" 0x5c
# A controller that keeps dying: at the fifth death in ten minutes run.sh
# stops both and exits 1, rather than restart it for ever.
for n in 2 3 4 5; do
  pid_a=$(a_pid)
  [[ -n "$pid_a" ]] || break
  kill -9 "$pid_a"
  ((n == 5)) && break
  within 90 restarted || break
done
for _ in $(seq 600); do kill -0 "$run" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$run" 2>/dev/null; then status=running; else wait "$run"; status=$?; fi
check "a killed five times in all: run.sh stops both and exits 1 (got $status)" test "$status" = 1
check "... saying why" grep -q "the fifth death in ten minutes: stopping both" "$dir/run.err"
check "... and no stratad of this state directory is left" bash -c "! pgrep -f 'stratad[ ].*--state-dir $dir/' >/dev/null"
# Started again on the same state directory: the same array, and Ctrl-C.
set -m
"$root/tools/run.sh" --state-dir "$dir" >"$dir/run2.out" 2>"$dir/run2.err" &
run=$!
set +m
check "run.sh started again on the same state: p1 is a's, p2 b's (within 240 s)" within 240 bash -c "$(declare -f owner owned_by); cli=$cli; owned_by p1 a && owned_by p2 b"
check "... and a's portal serves what was written" within 20 holds "$on_a" 0x5c
kill -INT "$run"
for _ in $(seq 600); do kill -0 "$run" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$run" 2>/dev/null; then
  status=timeout
else
  wait "$run"
  status=$?
fi
check "Ctrl-C of run.sh stops both controllers within 60 s (run.sh exit status 0, got $status)" test "$status" = 0
check "... and no stratad of this state directory is left" bash -c "! pgrep -f 'stratad[ ].*--state-dir $dir/' >/dev/null"
run=
exit $failed
