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
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
# start NAME ARGS...: starts a target; its portal in $portal, its stderr in $work/NAME.err
start() {
  local name=$1; shift
  "$target_bin" --listen 127.0.0.1:0 --target "$iqn" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q '^listening on' "$work/$name.out" && break
    sleep 0.05
  done
  local port
  port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/$name.out")
  [[ -n "$port" ]] || { echo "FAIL: the target did not start"; cat "$work/$name.err"; exit 1; }
  portal=127.0.0.1:$port
}
start open --luns 2 --lun-mib 64
failed=0
check() {  # check DESCRIPTION COMMAND... : the command must succeed
  local what=$1; shift
  if timeout 60 "$@" >"$work/log" 2>&1; then
    echo "ok: $what"
  else
    echo "FAIL: $what"; sed 's/^/    /' "$work/log"; failed=1
  fi
}
refused() {  # refused DESCRIPTION EXPECTED-OUTPUT COMMAND... : the command must fail, saying EXPECTED-OUTPUT
  local what=$1 expected=$2; shift 2
  if ! timeout 60 "$@" >"$work/log" 2>&1 && grep -q "$expected" "$work/log"; then
    echo "ok: $what"
  else
    echo "FAIL: $what (expected a failure saying '$expected')"; sed 's/^/    /' "$work/log"; failed=1
  fi
}
check "iscsi-ls finds the target" bash -c "iscsi-ls iscsi://$portal | grep -q 'Target:$iqn'"
check "iscsi-inq reads the standard INQUIRY" bash -c "iscsi-inq iscsi://$portal/$iqn/0 | grep -q 'Vendor:STRATA'"
check "iscsi-readcapacity16 reads 64 MiB" bash -c "iscsi-readcapacity16 iscsi://$portal/$iqn/1 | grep -q 'Total size:67108864'"

# iscsi-test-cu, one process per suite (Debian's 1.19 leaks test hooks
# across suites). Each suite listed must pass whole. Not listed yet: the
# suites of commands the unit does not have yet (PREFETCH, COMPARE AND
# WRITE, PERSISTENT RESERVE, GET LBA STATUS, ...).
suites=(
  SCSI.TestUnitReady SCSI.Inquiry SCSI.ReadCapacity10 SCSI.ReadCapacity16
  SCSI.Read6 SCSI.Read10 SCSI.Read12 SCSI.Read16
  SCSI.Write10 SCSI.Write12 SCSI.Write16
  SCSI.ReportSupportedOpcodes SCSI.ModeSense6 SCSI.Unmap SCSI.WriteSame10 SCSI.WriteSame16
  SCSI.Verify10 SCSI.Verify16
  iSCSI.iSCSIcmdsn iSCSI.iSCSITMF
)
# iSCSI.iSCSIdatasn runs against a target that declines immediate data:
# its second case reconnects, and libiscsi then renegotiates ImmediateData
# and sends the one block inside the command, with no Data-Out whose DataSN
# the test could break.
open_portal=$portal
start no-immediate --luns 1 --lun-mib 16 --immediate-data no
no_immediate_portal=$portal
suites+=(iSCSI.iSCSIdatasn)
for suite in "${suites[@]}"; do
  portal=$open_portal
  [[ $suite == iSCSI.iSCSIdatasn ]] && portal=$no_immediate_portal
  timeout 300 iscsi-test-cu -d --test="$suite" "iscsi://$portal/$iqn/0" >"$work/cu" 2>&1
  # CUnit's summary: "tests  Total  Ran  Passed  Failed  Inactive". The
  # "[FAILED]" lines above it are the target refusing what it must refuse.
  read -r pass fail < <(awk '$1 == "tests" { print $4, $5 }' "$work/cu")
  pass=${pass:-0}; fail=${fail:-1}
  skip=$(grep -c '\.\.\.SKIPPED\|\[SKIPPED\]' "$work/cu")
  if [[ "$fail" -eq 0 && "$pass" -gt 0 ]]; then
    echo "ok: iscsi-test-cu $suite ($pass passed, $skip skipped)"
  else
    echo "FAIL: iscsi-test-cu $suite ($pass passed, $fail failed, $skip skipped)"
    grep -B2 -A8 'FAILED' "$work/cu" | head -40 | sed 's/^/    /'
    failed=1
  fi
done

# CHAP, mutual CHAP and LUN masking: alice sees units 0 and 1 as LUNs 0
# and 1; bob sees only unit 1, as his LUN 5; anyone else sees nothing.
alice=iqn.2026-11.test:alice
bob=iqn.2026-11.test:bob
start guarded --luns 2 --lun-mib 16 --chap user1:secret-of-user1 --mutual-chap array1:secret-of-array1 \
  --acl "$alice" --acl "$bob=5:1"
guarded=$portal
creds="user1%secret-of-user1@$guarded"
check "CHAP: the right secret logs in" bash -c "iscsi-inq -i $alice iscsi://$creds/$iqn/0 | grep -q 'Vendor:STRATA'"
refused "CHAP: a wrong secret is refused" "Authentication failure" iscsi-inq -i "$alice" "iscsi://user1%wrong-secret-1@$guarded/$iqn/0"
refused "CHAP: no credentials are refused" "Authentication failure" iscsi-inq -i "$alice" "iscsi://$guarded/$iqn/0"
check "mutual CHAP: the target proves its secret" bash -c \
  "iscsi-inq -i $alice 'iscsi://$creds/$iqn/0?target_user=array1&target_password=secret-of-array1' | grep -q 'Vendor:STRATA'"
refused "mutual CHAP: the initiator refuses a target that does not know the secret it expects" "Invalid CHAP_R" \
  iscsi-inq -i "$alice" "iscsi://$creds/$iqn/0?target_user=array1&target_password=another-secret"
refused "masking: an initiator not listed is not authorised" "Authorization failure" iscsi-inq -i iqn.2026-11.test:eve "iscsi://$creds/$iqn/0"
check "masking: SendTargets hides the target from an initiator not listed" bash -c \
  "out=\$(iscsi-ls -i iqn.2026-11.test:eve iscsi://$guarded); [[ -z \$out ]]"
check "masking: alice reports LUNs 0 and 1" bash -c "iscsi-ls -s -i $alice iscsi://$creds | grep -c 'Lun:' | grep -qx 2"
check "masking: bob reports only LUN 5" bash -c "iscsi-ls -s -i $bob iscsi://$creds | grep 'Lun:' | grep -q 'Lun:5' && [[ \$(iscsi-ls -s -i $bob iscsi://$creds | grep -c 'Lun:') == 1 ]]"
check "masking: bob's LUN 5 is alice's LUN 1 (the same unit serial)" bash -c \
  "[[ \$(iscsi-inq -i $bob -e 1 -c 0x80 iscsi://$creds/$iqn/5 | grep -i serial) == \$(iscsi-inq -i $alice -e 1 -c 0x80 iscsi://$creds/$iqn/1 | grep -i serial) ]]"
refused "masking: bob has no LUN 0" "LOGICAL_UNIT_NOT_SUPPORTED\\|not supported\\|Failed" iscsi-readcapacity16 -i "$bob" "iscsi://$creds/$iqn/0"
check "the target logged why it refused each login" bash -c \
  "grep -q 'wrong response' $work/guarded.err && grep -q 'not allowed to log in' $work/guarded.err"
exit $failed
