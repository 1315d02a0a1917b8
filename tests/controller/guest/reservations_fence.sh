#!/bin/bash
# Guest command script (runs INSIDE the Debian 12 test guest of
# /work/shared/guest): the array's fence by persistent reservations on a
# real SCSI target (Debian's tgt, on the host) through the guest kernel's
# initiator. Two iSCSI sessions to one LU under two initiator names (two
# I_T nexuses: the two controllers' paths to a shared drive); the host's
# strata-fence-check, stratad's own reservation and I/O code, runs over
# them (../../../tools/fencecheck/main.cc says what it checks).
#
# args: PORT TARGET_IQN
# Every check prints "ok: ..." or "FAIL: ..."; the exit status is non-zero
# if any failed.
. "$GUEST_LIB"
set -u
P=$HOST_IP:$1 IQN=$2
failed=0
die() {
    echo "FAIL: $* -- cannot go on"
    iscsiadm -m session -P 3 2>&1 | head -60; dmesg | tail -n 40
    exit 1
}
. /share/strata_guest.sh  # check, step

start_udev
start_iscsid
for who in a b; do
    iscsiadm -m iface -I "strata-$who" -o new >/dev/null || die "iface strata-$who"
    iscsiadm -m iface -I "strata-$who" -o update -n iface.transport_name -v tcp >/dev/null
    iscsiadm -m iface -I "strata-$who" -o update -n iface.initiatorname \
        -v "iqn.2026-12.io.strata:controller-$who" >/dev/null || die "initiator name of strata-$who"
done
# tgt names its own portal (127.0.0.1) in SendTargets, which the guest
# cannot reach: the node records are made by hand, one per iface.
for who in a b; do
    iscsiadm -m node -o new -T "$IQN" -p "$P" -I "strata-$who" >/dev/null || die "node for controller $who"
    iscsiadm -m node -T "$IQN" -p "$P" -I "strata-$who" --login >/dev/null || die "login as controller $who"
done
udevadm settle -t 30
# Each session's disk, by its initiator name.
disk_of() {  # disk_of a|b
    iscsiadm -m session -P 3 | awk -v who="controller-$1" '
        /Iface Initiatorname:/ { mine = index($0, who) > 0 }
        /Attached scsi disk/ && mine { print $4; exit }'
}
A= B=
for _ in $(seq 100); do A=$(disk_of a); B=$(disk_of b); [ -n "$A" ] && [ -n "$B" ] && wait_dev "/dev/$A" 1 && wait_dev "/dev/$B" 1 && break; sleep 0.2; done
[ -n "$A" ] && [ -n "$B" ] || die "no disk for each session (a: '$A', b: '$B')"
check "two sessions, two disks for the one LU (a: $A, b: $B)" [ "$A" != "$B" ]
echo "---- strata-fence-check /dev/$A /dev/$B"
LD_LIBRARY_PATH=/share/lib /share/strata-fence-check "/dev/$A" "/dev/$B" 2048
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: strata-fence-check exited $rc"; failed=1; }
echo "---- the kernel's view"
dmesg | grep -i -m5 "reservation\|critical nexus\|EBADE" || true
for who in a b; do iscsiadm -m node -T "$IQN" -p "$P" -I "strata-$who" --logout >/dev/null 2>&1; done
exit $failed
