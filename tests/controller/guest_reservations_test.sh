#!/usr/bin/env bash
# The fence on the medium, proven on a real SCSI target through a real
# kernel initiator: Debian's tgt (which implements persistent
# reservations) on this machine's loopback, the Debian 12 test guest's
# open-iscsi logged in to its LU twice under two initiator names, and
# stratad's own reservation and I/O code (strata-fence-check) over the two
# disks: a preempted registrant's write is refused with RESERVATION
# CONFLICT and held at its gate, never written; the new owner's writes
# land (guest/reservations_fence.sh, tools/fencecheck/main.cc).
#   guest_reservations_test.sh PATH/TO/strata-fence-check
# Exit status: the guest script's; 1 for a host-side failure; 77 (skip)
# only when the guest cannot run here.
set -uo pipefail
tool=${1:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
test_name=guest_reservations_test.sh
budget=${GUEST_RESERVATIONS_TIMEOUT:-900}
start_time=$SECONDS
source "$here/../target/guest/host_lib.sh"
[[ -x "$tool" ]] || { echo "FAIL: usage: $0 PATH/TO/strata-fence-check (got '$tool')"; exit 2; }
command -v tgtd >/dev/null || { echo "FAIL: tgtd is missing (tools/install-deps.sh installs tgt)"; exit 1; }

dir=$(mktemp -d); echo "state in $dir"
export TGT_CONTROL_PORT=$((1000 + RANDOM % 20000))
port=$((20000 + RANDOM % 12000))
export TGT_PORTALS=$port TGT_DIR=$dir/tgt TGT_IQN=iqn.2026-12.io.strata:fence-check
trap '"$guest_dir/host-tgt.sh" stop >/dev/null 2>&1; [[ -n "${KEEP:-}" ]] || rm -rf "$dir"' EXIT
share=$dir/share
guest_prepare "$share"
cp "$tool" "$share/strata-fence-check"
mkdir -p "$share/lib"
# The guest image has no liburing: the host's goes with the tool.
cp "$(ldd "$tool" | awk '/liburing/ {print $3}')" "$share/lib/" ||
  { echo "FAIL: no liburing for the tool"; exit 1; }
"$guest_dir/host-tgt.sh" start 64 || { echo "FAIL: tgtd did not start"; exit 1; }

left=$(remaining)
((left > 120)) || { echo "FAIL: the image build used up the budget"; exit 1; }
"$guest_dir/run-guest.sh" -t "$((left - 20))" -s "$share" "$here/guest/reservations_fence.sh" \
  "$port" "$TGT_IQN" >"$dir/guest.log" 2>&1
rc=$?
cat "$dir/guest.log"
((rc == 125)) && ! grep -q GUEST-READY "$dir/guest.log" && guest_skip "the guest never booted (run-guest.sh status 125)"
grep -q "^PASS: 0 failed" "$dir/guest.log" || { echo "FAIL: strata-fence-check did not pass"; exit 1; }
echo "guest status $rc, $((SECONDS - start_time)) s"
exit $rc
