#!/usr/bin/env bash
# Two Strata controllers against the Linux kernel's NVMe/TCP host with
# native NVMe multipath: the Debian 12 test guest connects to both
# controllers' NVMe/TCP ports, puts ext4 on namespace 1 (pool p1, a's) and
# runs fio --verify=crc32c rounds with four jobs on it and one raw on
# namespace 2 (pool p2, b's) (guest/nvme_multipath_failover.sh), while this
# script, on the host (the guest finds both ports through a's discovery
# log, and connects to them with nvme connect-all):
#   1. kills the pool's owner (a) with -9 mid-run: b takes the pool over,
#      and its port turns namespace 1 optimized (ANA change);
#   2. restarts a: the host reconnects to it, and b hands the pool back;
#   3. moves the pool to b and back through the API (planned failover).
# Every fio round must end with 0 errors and its verify passing, and the
# file system must be clean at the end.
#   guest_nvme_multipath_test.sh PATH/TO/stratad PATH/TO/strata
# Exit status: the guest script's and the host's checks; 77 (skip) only
# when the guest cannot run here.
set -uo pipefail
stratad=$1
cli=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
test_name=guest_nvme_multipath_test.sh
budget=${GUEST_MULTIPATH_TIMEOUT:-1200}
start_time=$SECONDS
source "$here/../target/guest/host_lib.sh"
source "$here/lib.sh"

dir=$(mktemp -d); echo "state in $dir"
pid=
pid_b=
trap 'logs_if_failed "$dir/a.err" "$dir/b.err"; kill_all "$pid" "$pid_b" "${saved:-}"; [[ -n "${KEEP:-}" ]] || rm -rf "$dir"' EXIT
share=$dir/share
guest_prepare "$share"

port=$((20000 + RANDOM % 12000))
port_b=$((port + 1))
nvme_a=$((port + 3))
nvme_b=$((port + 4))
api_a=127.0.0.1:$((port + 2))
api_b=127.0.0.2:$((port + 2))
link=127.0.0.2:$((port + 5))
nqn=nqn.2026-11.io.strata:array
# The guest reaches this machine's 127.0.0.1 only (as 10.0.2.2): both
# controllers' NVMe/TCP ports are there, on two ports, and each names both
# in its discovery log (--nvme-portal) at the address the guest uses.
start_a() {
  "$stratad" --small-shelf --state-dir "$dir/a" --shelf "$dir/shelf" --iscsi 127.0.0.1:$port --nvme 127.0.0.1:$nvme_a \
    --nvme-portal 10.0.2.2:$nvme_a --nvme-portal 10.0.2.2:$nvme_b,2 \
    --grpc "$api_a" --partner-link "$link" >>"$dir/a.out" 2>>"$dir/a.err" &
  pid=$!
  wait_ready "$dir/a.out" "$dir/a.err"
}
start_b() {
  "$stratad" --controller b --state-dir "$dir/b" --shelf "$dir/shelf" --iscsi 127.0.0.1:$port_b --nvme 127.0.0.1:$nvme_b \
    --nvme-portal 10.0.2.2:$nvme_b --nvme-portal 10.0.2.2:$nvme_a,1 \
    --grpc "$api_b" --partner-link "$link" >"$dir/b.out" 2>"$dir/b.err" &
  pid_b=$!
  saved=$pid
  pid=$pid_b
  wait_ready "$dir/b.out" "$dir/b.err"
  pid=$saved
  saved=
}
events_count() {  # events_count API TEXT N SECONDS
  for _ in $(seq $(($4 * 10))); do [[ $("$cli" --api "$1" events --limit 1000 2>/dev/null | grep -c "$2") -ge $3 ]] && return 0; sleep 0.1; done
  return 1
}
note() { echo "$(date +%T) $*"; echo "$*" >"$share/note"; }

start_a
start_b
check "b holds a current copy of pool p1's metadata" events_count "$api_a" "controller b holds a current copy of its metadata" 1 30
check "a handed pool p2 over to b, its home (the two controllers' default)" events_count "$api_a" "handed over to controller b, its home, in" 1 60

left=$(remaining)
((left > 300)) || { echo "FAIL: the image build used up the budget"; exit 1; }
"$guest_dir/run-guest.sh" -t "$((left - 30))" -s "$share" "$here/guest/nvme_multipath_failover.sh" "$nvme_a" "$nvme_b" "$nqn" \
  >"$dir/guest.log" 2>&1 &
guest=$!
for _ in $(seq $((left - 60))); do [[ -e "$share/ready" ]] && break; kill -0 $guest 2>/dev/null || break; sleep 1; done
if [[ ! -e "$share/ready" ]]; then
  wait $guest; rc=$?
  cat "$dir/guest.log"
  ((rc == 125)) && ! grep -q GUEST-READY "$dir/guest.log" && guest_skip "the guest never booted (run-guest.sh status 125)"
  echo "FAIL: the guest did not start fio (status $rc)"; exit 1
fi
echo "ok: the guest runs fio on ext4 over native NVMe multipath"
sleep 10

note "1. kill -9 of controller a, the pool's owner"
kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
check "b took the pool over" events_count "$api_b" "pools/p1 .*taken over from controller a" 1 30
sleep 10
note "2. controller a restarted: failback under load"
start_a
check "b handed the pool back to a" events_count "$api_b" "handed over to controller a, its home, in" 1 90
sleep 10
note "3. planned failover to b and back"
check "strata pool move p1 --to b" quiet "$cli" --api "$api_a" pool move p1 --to b --wait
sleep 8
check "strata pool move p1 --to a" quiet "$cli" --api "$api_b" pool move p1 --to a --wait
sleep 8
touch "$share/stop"
wait $guest; rc=$?
sed -n '/native NVMe multipath is on/,$p' "$dir/guest.log"
echo "---- the fio rounds"
grep -E "^(RESULT|host:|FAIL)" "$dir/guest.log" | tail -n 80
mapfile -t guest_failures < <(sed -n 's/^FAIL: /in the guest: /p' "$dir/guest.log")
failures+=("${guest_failures[@]}")
((rc == 124)) && failures+=("the guest did not finish in time: its last line was \"$(grep -v -e '^\[run-guest\]' -e '^qemu-system' "$dir/guest.log" | tail -n 1)\"")
check "the guest's checks passed (status $rc)" test "$rc" = 0
check "both controllers are alive" eval 'kill -0 "$pid" 2>/dev/null && kill -0 "$pid_b" 2>/dev/null'
exit "${failed:-0}"
