#!/usr/bin/env bash
# Strata's NVMe/TCP target against the Linux kernel's own host (nvme-tcp +
# nvme-cli), run in the Debian 12 test guest of /work/shared/guest (QEMU,
# Debian's kernel). The guest reaches this machine's loopback as 10.0.2.2.
#   guest_nvme_test.sh PATH/TO/strata-iscsi-target
#
# Starts the target's NVMe/TCP port on a free loopback port, allowing one
# host NQN, runs guest/nvme_linux_host.sh in the guest (discovery, a host
# refused, connect, nvme list / id-ctrl / id-ns / list-subsys, ext4 + fio
# crc32c verify on two queues, reconnect, a disconnect in mid-I/O, keep
# alive; then the target frozen past the host's keep alive, and restarted,
# which this script does when the guest asks), then checks that the target logged the refused host and nothing
# unexpected, and that it is still alive and stops cleanly.
#
# Exit status: the guest script's (0 = every check passed), 1 for a
# host-side failure, 77 (skip) only when the guest cannot run here.
#
# Environment: GUEST_DIR, GUEST_NVME_TIMEOUT (seconds, default 900),
# GUEST_CACHE (as guest_iscsi_test.sh).
set -uo pipefail
target_bin=${1:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
guest_script=$here/guest/nvme_linux_host.sh
test_name=guest_nvme_test.sh
budget=${GUEST_NVME_TIMEOUT:-900}
start_time=$SECONDS
source "$here/guest/host_lib.sh"
host_failed=0

if [[ -z "$target_bin" || ! -x "$target_bin" ]]; then
  echo "FAIL: usage: $0 PATH/TO/strata-iscsi-target (got '${target_bin}', not an executable)"
  exit 2
fi

work=$(mktemp -d)
target_pid=""
cleanup() {
  [[ -n "$target_pid" ]] && kill -KILL "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

share=$work/share
guest_prepare "$share"

nqn=nqn.2026-11.io.strata:guest-nvme
hostnqn=nqn.2014-08.org.example:strata-nvme-test-host
# start_target: the target, on $port (0 the first time: a free one); its
# pid in $work/target.pid.
port=0
start_target() {
  "$target_bin" --listen 127.0.0.1:0 --nvme-listen 127.0.0.1:$port --nqn "$nqn" --nvme-host "$hostnqn" \
    --luns 1 --lun-mib 256 --block-size 4096 >"$work/target.out.now" 2>>"$work/target.err" &
  target_pid=$!
  echo "$target_pid" >"$work/target.pid"
  for _ in $(seq 100); do
    grep -q '^nvme listening on' "$work/target.out.now" && break
    kill -0 "$target_pid" 2>/dev/null || break
    sleep 0.05
  done
  cat "$work/target.out.now"
}
start_target >"$work/target.out"
port=$(sed -n 's/^nvme listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/target.out")
if [[ -z "$port" ]]; then
  echo "FAIL: the target did not start"; cat "$work/target.out" "$work/target.err"; exit 1
fi
echo "ok: subsystem $nqn listening on 127.0.0.1:$port (guest: 10.0.2.2:$port)"

left=$(remaining)
((left > 60)) || { echo "FAIL: the image build used up the ${budget} s budget"; exit 1; }
echo "== guest run (limit $((left - 15)) s)"
# The guest asks, through files in the share, for the target to be frozen
# (SIGSTOP for 12 s, past its host's keep alive) and to be restarted.
timeout -k 10 "$left" "$guest_dir/run-guest.sh" -t "$((left - 15))" -s "$share" "$guest_script" \
  "$port" "$nqn" "$hostnqn" >"$work/guest.log" 2>&1 &
guest=$!
await_guest() {  # await_guest FILE: true once the guest wrote it, false if the guest ended first
  while kill -0 "$guest" 2>/dev/null; do [[ -e "$share/$1" ]] && return 0; sleep 0.1; done
  return 1
}
if await_guest freeze; then
  kill -STOP "$target_pid"; sleep 12; kill -CONT "$target_pid"
  echo "host: the target was frozen 12 s"
  touch "$share/thawed"
fi
if await_guest restart; then
  kill -TERM "$target_pid"; wait "$target_pid"
  trc=$?
  ((trc == 0)) || { echo "FAIL: the target exited with status $trc on SIGTERM (before its restart)"; host_failed=1; }
  start_target >>"$work/target.out"
  echo "host: the target was restarted"
  touch "$share/restarted"
fi
wait "$guest"
rc=$?
cat "$work/guest.log"
if ((rc == 125)) && ! grep -q 'GUEST-READY' "$work/guest.log"; then
  guest_skip "the guest never booted (run-guest.sh status 125, no GUEST-READY; QEMU's stderr above)"
fi

if kill -0 "$target_pid" 2>/dev/null; then
  echo "ok: the target is still running after the guest's run"
else
  wait "$target_pid"; echo "FAIL: the target died during the run (status $?)"; host_failed=1; target_pid=""
fi
if grep -q "Connect refused: host nqn.2014-08.org.example:intruder is not allowed in $nqn" "$work/target.err"; then
  echo "ok: the target logged the refused host"
else
  echo "FAIL: the target did not log the refused host"; host_failed=1
fi
# Besides the refusal, only controllers ending as their hosts disconnect
# (or as the host gives up on them while the target was frozen).
others=$(grep -v -e "Connect refused: host nqn.2014-08.org.example:intruder" -e "ended: its admin queue closed" -e "ms (keep alive)$" "$work/target.err")
if [[ -z "$others" ]]; then echo "ok: the target logged nothing else"
else echo "FAIL: the target logged more than expected:"; echo "$others" | sed 's/^/    /'; host_failed=1; fi
if [[ -n "$target_pid" ]]; then
  kill -TERM "$target_pid"
  for _ in $(seq 100); do kill -0 "$target_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$target_pid" 2>/dev/null; then
    kill -KILL "$target_pid"; wait "$target_pid" 2>/dev/null; target_pid=""
    echo "FAIL: the target did not stop within 10 s of SIGTERM (killed)"; host_failed=1
  else
    wait "$target_pid"; trc=$?; target_pid=""
    if ((trc == 0)); then echo "ok: the target stopped cleanly on SIGTERM"
    else echo "FAIL: the target exited with status $trc on SIGTERM"; host_failed=1; fi
  fi
fi
echo "---- target stderr ($(wc -l <"$work/target.err") lines)"
sed 's/^/    /' "$work/target.err" | head -n 40
if ((rc != 0)); then
  case $rc in
    124) echo "FAIL: the guest run timed out (limit $((left - 15)) s): a hang?" ;;
    *) echo "FAIL: the guest script failed (status $rc)" ;;
  esac
  exit "$rc"
fi
((host_failed)) && { echo "FAIL: host-side checks failed"; exit 1; }
echo "PASS: the Linux NVMe/TCP host against strata-iscsi-target ($((SECONDS - start_time)) s)"
exit 0
