#!/usr/bin/env bash
# Strata's iSCSI target against the Linux kernel's own initiator (open-iscsi
# + iscsi_tcp), run in the Debian 12 test guest of /work/shared/guest (QEMU,
# Debian's kernel). The guest reaches this machine's loopback as 10.0.2.2.
#   guest_iscsi_test.sh PATH/TO/strata-iscsi-target [TARGET-ARG...]   (e.g. --loops 3)
#
# Starts the target on a free loopback port with CHAP, mutual CHAP,
# discovery CHAP and an ACL naming the guest's initiator, runs
# guest/iscsi_linux_initiator.sh in the guest (discovery, CHAP logins, wrong
# secrets refused, ext4 + fio crc32c verify, logout/login persistence), then
# checks that the target logged the refused login and is still alive.
#
# Exit status: the guest script's (0 = every check passed), 1 for a
# host-side failure, 77 (skip) only when the guest cannot run here (not
# root, no guest harness, the guest image cannot be built, no QEMU, or the
# guest never booted).
#
# Environment:
#   GUEST_DIR             the guest harness (default /work/shared/guest)
#   GUEST_ISCSI_TIMEOUT   wall-clock budget in seconds, image build included
#                         (default 900)
#   GUEST_CACHE           guest image cache; the default is a cache of its own,
#                         /var/tmp/storage-guest-e2fsprogs, because the image
#                         needs e2fsprogs (mkfs.ext4), which the harness's
#                         default image lacks (adding it to the shared cache
#                         would make every other guest test rebuild it)
set -uo pipefail
target_bin=${1:-}
target_args=("${@:2}")  # for the target, e.g. --loops 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
guest_script=$here/guest/iscsi_linux_initiator.sh
test_name=guest_iscsi_test.sh
budget=${GUEST_ISCSI_TIMEOUT:-900}
start_time=$SECONDS
source "$here/guest/host_lib.sh"

if [[ -z "$target_bin" || ! -x "$target_bin" ]]; then
  echo "FAIL: usage: $0 PATH/TO/strata-iscsi-target (got '${target_bin}', not an executable)"
  exit 2
fi
[[ -r "$guest_script" ]] || { echo "FAIL: missing $guest_script"; exit 1; }

work=$(mktemp -d)
target_pid=""
cleanup() {
  [[ -n "$target_pid" ]] && kill -KILL "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

share=$work/share
guest_prepare "$share"

# The target: a free loopback port (port 0), CHAP + mutual CHAP + discovery CHAP,
# and an ACL that admits only the initiator name the guest script sets.
secret() { od -An -N8 -tx1 /dev/urandom | tr -d ' \n'; }   # 16 hex digits
iqn=iqn.2026-11.io.strata:guest-linux
initiator=iqn.2004-10.com.example.testguest:strata-iscsi-test
chap_user=linuxinitiator chap_secret=ini$(secret)
mutual_user=stratatarget mutual_secret=tgt$(secret)
disc_user=discoverer disc_secret=dsc$(secret)
"$target_bin" --listen 127.0.0.1:0 --target "$iqn" --luns 1 --lun-mib 128 \
  --chap "$chap_user:$chap_secret" --mutual-chap "$mutual_user:$mutual_secret" \
  --discovery-chap "$disc_user:$disc_secret" --acl "$initiator" "${target_args[@]}" \
  >"$work/target.out" 2>"$work/target.err" &
target_pid=$!
for _ in $(seq 100); do
  grep -q '^listening on' "$work/target.out" && break
  kill -0 "$target_pid" 2>/dev/null || break
  sleep 0.05
done
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/target.out")
if [[ -z "$port" ]]; then
  echo "FAIL: the target did not start"; cat "$work/target.out" "$work/target.err"; exit 1
fi
echo "ok: target $iqn listening on 127.0.0.1:$port (guest: 10.0.2.2:$port)"

# The guest run, bounded by what is left of the budget.
left=$(remaining)
((left > 60)) || { echo "FAIL: the image build used up the ${budget} s budget"; exit 1; }
echo "== guest run (limit $((left - 15)) s)"
timeout -k 10 "$left" "$guest_dir/run-guest.sh" -t "$((left - 15))" -s "$share" "$guest_script" \
  "$port" "$iqn" "$initiator" "$chap_user" "$chap_secret" "$mutual_user" "$mutual_secret" \
  "$disc_user" "$disc_secret" 2>&1 | tee "$work/guest.log"
rc=${PIPESTATUS[0]}
if ((rc == 125)) && ! grep -q 'GUEST-READY' "$work/guest.log"; then
  guest_skip "the guest never booted (run-guest.sh status 125, no GUEST-READY; QEMU's stderr above)"
fi

# Host-side checks on the target.
host_failed=0
if kill -0 "$target_pid" 2>/dev/null; then
  echo "ok: the target is still running after the guest's run"
else
  wait "$target_pid"; echo "FAIL: the target died during the run (status $?)"; host_failed=1; target_pid=""
fi
# The target must have logged exactly the refusals the guest provoked (and
# nothing else: no dropped connection, no missed NOP-In, no other refusal).
# The wrong mutual secret is caught by the initiator, not the target.
expect_log() {  # expect_log DESCRIPTION PATTERN
  if grep -q -- "$2" "$work/target.err"; then echo "ok: the target logged $1"
  else echo "FAIL: the target did not log $1"; host_failed=1; fi
}
expect_log "the refused discovery without CHAP" "login of initiator $initiator from .* refused: .*must authenticate"
expect_log "the refused discovery with a wrong secret" "login of initiator $initiator from .* refused: CHAP failed for user '$disc_user': wrong response"
expect_log "the refused login with a wrong secret" "login of initiator $initiator from .* refused: CHAP failed for user '$chap_user': wrong response"
others=$(grep -v -e "refused: .*must authenticate" -e "refused: CHAP failed for user '$disc_user': wrong response" \
  -e "refused: CHAP failed for user '$chap_user': wrong response" "$work/target.err")
if [[ -z "$others" ]]; then echo "ok: the target logged nothing else"
else echo "FAIL: the target logged more than the provoked refusals:"; echo "$others" | sed 's/^/    /'; host_failed=1; fi
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
if ((rc != 0 || host_failed)); then
  sed 's/^/    /' "$work/target.err"
else
  sed 's/^/    /' "$work/target.err" | head -n 20
fi
if ((rc != 0)); then
  case $rc in
    124) echo "FAIL: the guest run timed out (limit $((left - 15)) s): a hang?" ;;
    *) echo "FAIL: the guest script failed (status $rc)" ;;
  esac
  exit "$rc"
fi
((host_failed)) && { echo "FAIL: host-side checks failed"; exit 1; }
echo "PASS: Linux open-iscsi against strata-iscsi-target ($((SECONDS - start_time)) s)"
exit 0
