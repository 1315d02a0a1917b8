#!/usr/bin/env bash
# Strata's iSCSI target against real initiators: libiscsi's tools
# (iscsi-ls, iscsi-inq, iscsi-readcapacity16) and a set of iscsi-test-cu
# suites, on loopback.
#   iscsi_clients_test.sh PATH/TO/strata-iscsi-target
set -uo pipefail
target_bin=$1
for tool in iscsi-ls iscsi-inq iscsi-readcapacity16 iscsi-test-cu; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is missing (Debian package libiscsi-bin; tools/install-deps.sh installs it)"
    exit 77
  fi
done
iqn=iqn.2026-11.io.strata:test
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$work"' EXIT
"$target_bin" --listen 127.0.0.1:0 --target "$iqn" --luns 2 --lun-mib 64 >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 100); do
  grep -q '^listening on' "$work/out" && break
  sleep 0.05
done
port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/out")
[[ -n "$port" ]] || { echo "FAIL: the target did not start"; cat "$work/err"; exit 1; }
portal=127.0.0.1:$port
failed=0
check() {  # check DESCRIPTION COMMAND... : the command must succeed
  local what=$1; shift
  if timeout 60 "$@" >"$work/log" 2>&1; then
    echo "ok: $what"
  else
    echo "FAIL: $what"; sed 's/^/    /' "$work/log"; failed=1
  fi
}
check "iscsi-ls finds the target" bash -c "iscsi-ls iscsi://$portal | grep -q 'Target:$iqn'"
check "iscsi-inq reads the standard INQUIRY" bash -c "iscsi-inq iscsi://$portal/$iqn/0 | grep -q 'Vendor:STRATA'"
check "iscsi-readcapacity16 reads 64 MiB" bash -c "iscsi-readcapacity16 iscsi://$portal/$iqn/1 | grep -q 'Total size:67108864'"

# iscsi-test-cu, one process per suite (Debian's 1.19 leaks test hooks
# across suites). Each suite listed must pass whole. Not listed yet:
# iSCSI.iSCSIdatasn (its second case reconnects, and the library then sends
# the block as immediate data, with no DataSN to break), and the suites of
# commands the unit does not have yet (PREFETCH, COMPARE AND WRITE,
# PERSISTENT RESERVE, GET LBA STATUS, ...).
suites=(
  SCSI.TestUnitReady SCSI.Inquiry SCSI.ReadCapacity10 SCSI.ReadCapacity16
  SCSI.Read6 SCSI.Read10 SCSI.Read12 SCSI.Read16
  SCSI.Write10 SCSI.Write12 SCSI.Write16
  SCSI.ReportSupportedOpcodes SCSI.ModeSense6 SCSI.Unmap SCSI.WriteSame10 SCSI.WriteSame16
  SCSI.Verify10 SCSI.Verify16
  iSCSI.iSCSIcmdsn iSCSI.iSCSITMF
)
for suite in "${suites[@]}"; do
  timeout 300 iscsi-test-cu -d --test="$suite" "iscsi://$portal/$iqn/0" >"$work/cu" 2>&1
  pass=$(grep -c '^ *Test: .* \.\.\.passed' "$work/cu")
  fail=$(grep -c '\.\.\.FAILED' "$work/cu")
  skip=$(grep -c '\.\.\.SKIPPED\|\[SKIPPED\]' "$work/cu")
  if [[ "$fail" -eq 0 && "$pass" -gt 0 ]]; then
    echo "ok: iscsi-test-cu $suite ($pass passed, $skip skipped)"
  else
    echo "FAIL: iscsi-test-cu $suite ($pass passed, $fail failed, $skip skipped)"
    grep -B2 -A8 'FAILED' "$work/cu" | head -40 | sed 's/^/    /'
    failed=1
  fi
done
kill "$pid"; wait "$pid" 2>/dev/null
exit $failed
