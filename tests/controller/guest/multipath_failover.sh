#!/bin/bash
# Guest command script (runs INSIDE the Debian 12 test guest of
# /work/shared/guest): the Linux kernel's initiator (open-iscsi) logged in to
# both controllers of a Strata array, dm-multipath over the two paths with
# Strata's docs/multipath.conf (ALUA: the owner's path active/optimized,
# the partner's active/non-optimized and forwarding), ext4 on the multipath
# device (LUN 0, pool p1, a's), fio --verify=crc32c with several jobs on
# it and one on LUN 1 (pool p2, b's) raw, round after round, while
# the host kills, restarts, moves and freezes controllers
# (../guest_multipath_test.sh). Host and guest meet through files in the
# share: the guest writes /share/ready once fio runs, the host writes
# /share/stop when its cases are done.
#
# args: PORT_A PORT_B TARGET_IQN
# Every check prints "ok: ..." or "FAIL: ..."; the exit status is non-zero
# if any failed. Each fio round prints its summary line: RESULT ...
. "$GUEST_LIB"
set -u
PA=$HOST_IP:$1 PB=$HOST_IP:$2 IQN=$3
MNT=/mnt/strata
failed=0
die() {
    echo "FAIL: $* -- cannot go on"
    multipath -ll 2>&1; iscsiadm -m session -P 1 2>&1 | head -40; dmesg | tail -n 60
    exit 1
}
. /share/strata_guest.sh  # check, load_ext4 (guest_prepare put it there)

modprobe -a dm-multipath dm-round-robin dm-service-time scsi_dh_alua || die "no dm-multipath modules"
load_ext4 || die "ext4 could not be loaded from /share/modules"
cp /share/multipath.conf /etc/multipath.conf
start_udev
start_iscsid
for P in $PA $PB; do
    iscsiadm -m discovery -t st -p "$P" >/dev/null || die "discovery at $P failed"
    # a dead controller's path goes to dm-multipath after 5 s, not 120 s
    iscsiadm -m node -T "$IQN" -p "$P" -o update -n node.session.timeo.replacement_timeout -v 5
    iscsiadm -m node -T "$IQN" -p "$P" --login >/dev/null || die "login at $P failed"
done
udevadm settle -t 30
multipathd
# The two controllers' default: LUN 0 (pool p1, a's) and LUN 1 (pool p2, b's).
map_of_lun() {  # map_of_lun LUN: the multipath map over that LUN's paths
    local dev
    dev=$(lsscsi | awk -v l=":$1]" '$2 == "disk" && index($1, l) {print $NF; exit}')
    [ -n "$dev" ] && multipathd show paths format "%d %m" 2>/dev/null | awk -v d="${dev#/dev/}" '$1 == d && $2 != "[orphan]" {print $2}'
}
MP= MP1=
for _ in $(seq 150); do MP=$(map_of_lun 0); MP1=$(map_of_lun 1); [ -n "$MP" ] && [ -n "$MP1" ] && break; sleep 0.2; done
[ -n "$MP" ] && [ -n "$MP1" ] || { multipath -v3 2>&1 | tail -30; die "no multipath maps for LUN 0 and LUN 1"; }
sleep 3
echo "---- multipath -ll, before"
multipath -ll | tee /tmp/mp-all-before
multipath -ll "$MP" > /tmp/mp-before
multipath -ll "$MP1" > /tmp/mp1-before
check "LUN 0: two paths in two path groups" [ "$(grep -c -E 'status=(active|enabled)' /tmp/mp-before)" = 2 ]
check "LUN 0: the optimized group (prio 50) is active" grep -q "prio=50 status=active" /tmp/mp-before
check "LUN 0: the non-optimized group (prio 10) is enabled" grep -q "prio=10 status=enabled" /tmp/mp-before
# a's session is the first (host 0), b's the second: LUN 0's optimized path is a's, LUN 1's b's.
check "LUN 0 is optimized through controller a's port" sh -c "grep -A1 'prio=50' /tmp/mp-before | grep -q ' 0:0:0:0 '"
check "LUN 1 is optimized through controller b's port" sh -c "grep -A1 'prio=50' /tmp/mp1-before | grep -q ' 1:0:0:1 '"

DEV=/dev/mapper/$MP
mkfs.ext4 -F -q -b 4096 "$DEV" || die "mkfs.ext4 on $DEV failed"
mkdir -p "$MNT"
mount -t ext4 "$DEV" "$MNT" || die "mount failed"
touch /share/ready
log "fio rounds on $MNT until the host says stop"
round=0
while [ ! -e /share/stop ] && [ "$round" -lt 200 ]; do
    round=$((round + 1))
    # LUN 1 too, raw, at the same time: its owner (b) stays, its paths change.
    fio --name=l1r$round --filename=/dev/mapper/$MP1 --offset=$(( (round % 8) * 16 ))M --size=16M --bs=4k --rw=randwrite \
        --ioengine=libaio --iodepth=4 --direct=1 --verify=crc32c --verify_fatal=1 --output-format=terse > /tmp/fio1.out 2>&1 &
    lun1=$!
    fio --name=r$round --directory="$MNT" --numjobs=4 --size=8M --bs=4k --rw=randwrite --ioengine=libaio --iodepth=8 \
        --direct=1 --verify=crc32c --verify_fatal=1 --group_reporting --output-format=terse > /tmp/fio.out 2>&1
    rc=$?
    wait $lun1; rc1=$?
    errors1=$(awk -F';' 'NR==1 {print $5}' /tmp/fio1.out)
    echo "RESULT round $round LUN 1 raw fio rc=$rc1 errors=${errors1:-?}"
    if [ "$rc1" != 0 ] || [ "${errors1:-1}" != 0 ]; then
        echo "FAIL: fio round $round on LUN 1 (rc $rc1, errors ${errors1:-?})"; tail -n 20 /tmp/fio1.out; failed=1
    fi
    # terse v3: field 5 is the total error count
    errors=$(awk -F';' 'NR==1 {print $5}' /tmp/fio.out)
    echo "RESULT round $round $(log) LUN 0 ext4 fio rc=$rc errors=${errors:-?}"
    if [ "$rc" != 0 ] || [ "${errors:-1}" != 0 ]; then
        echo "FAIL: fio round $round (rc $rc, errors ${errors:-?})"; tail -n 20 /tmp/fio.out; failed=1
    fi
    [ -e /share/note ] && { echo "host: $(cat /share/note)"; rm -f /share/note; }
done
check "fio ran more than one round" [ "$round" -gt 1 ]
sleep 5
echo "---- multipath -ll, after"
multipath -ll | tee /tmp/mp-all-after
multipath -ll "$MP" > /tmp/mp-after
check "after: both of LUN 0's paths up again" [ "$(grep -c 'active ready running' /tmp/mp-after)" = 2 ]
check "after: LUN 0's optimized group is active, through a's port again" sh -c "grep -A1 'prio=50 status=active' /tmp/mp-after | grep -q ' 0:0:0:0 '"
# A dead path's commands fail on its sd device (dev sdX: dm-multipath
# retries them on the other path); none may fail on the multipath device.
check "no I/O error reached dm or the file system" sh -c "! dmesg | grep -E 'I/O error, dev dm-|EXT4-fs error|Buffer I/O error'"
umount "$MNT" || { echo "FAIL: umount"; failed=1; }
check "fsck finds the file system clean" fsck.ext4 -n -f "$DEV"
multipath -F >/dev/null 2>&1
iscsiadm -m node -T "$IQN" --logout >/dev/null 2>&1
echo "---- SCSI and multipath lines of dmesg"
dmesg | grep -i -E 'alua|multipath|device-mapper|sd [0-9]|connection[0-9]' | tail -n 40
exit "$failed"
