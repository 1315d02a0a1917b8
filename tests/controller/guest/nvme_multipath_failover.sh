#!/bin/bash
# Guest command script (runs INSIDE the Debian 12 test guest of
# /work/shared/guest): the Linux kernel's NVMe/TCP host connected to both
# controllers of a Strata array, native NVMe multipath over the two paths
# (ANA: the pool's owner optimized, the partner non-optimized and
# forwarding), ext4 on namespace 1 (pool p1, a's), fio --verify=crc32c
# with four jobs on it and one on namespace 2 (pool p2, b's) raw, round
# after round, while the host kills, restarts and moves controllers
# (../guest_nvme_multipath_test.sh). Host and guest meet through files in
# the share: /share/ready once fio runs, /share/stop when the host is done.
#
# args: PORT_A PORT_B SUBSYSTEM_NQN
# Every check prints "ok: ..." or "FAIL: ..."; the exit status is non-zero
# if any failed. Each fio round prints its summary line: RESULT ...
. "$GUEST_LIB"
set -u
PA=$1 PB=$2 NQN=$3
HOSTNQN=nqn.2014-08.org.example:strata-nvme-multipath
MNT=/mnt/strata
failed=0
die() {
    echo "FAIL: $* -- cannot go on"
    nvme list-subsys 2>&1 | head -20; dmesg | grep -i nvme | tail -n 60
    exit 1
}
. /share/strata_guest.sh  # check, load_ext4
# The head (multipath) device of namespace $1 of the subsystem.
head_of() {
    local b
    for b in /sys/block/nvme*n*; do
        case "${b##*/}" in *c*) continue ;; esac
        [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || [ "$(cat "$b/device/../subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
        [ "$(cat "$b/nsid" 2>/dev/null)" = "$1" ] && { echo "/dev/${b##*/}"; return 0; }
    done
    return 1
}
paths() { nvme list-subsys "$1" 2>/dev/null | grep -E 'tcp traddr'; }

modprobe nvme-tcp || die "no nvme-tcp"
check "native NVMe multipath is on" grep -q Y /sys/module/nvme_core/parameters/multipath
load_ext4 || die "ext4 could not be loaded from /share/modules"
# Discovery at a's port names the subsystem at both controllers' ports;
# connect-all connects to each. A dead controller's path: reconnect every
# second, for as long as it takes.
nvme discover -t tcp -a "$HOST_IP" -s "$PA" --hostnqn="$HOSTNQN" > /tmp/discover.out 2>&1
sed 's/^/    /' /tmp/discover.out | grep -E 'trsvcid|subnqn|traddr'
check "discovery at a's port names the subsystem at a's port and at b's" \
    sh -c "grep -q 'trsvcid: $PA' /tmp/discover.out && grep -q 'trsvcid: $PB' /tmp/discover.out && grep -q 'traddr:  $HOST_IP' /tmp/discover.out"
nvme connect-all -t tcp -a "$HOST_IP" -s "$PA" --hostnqn="$HOSTNQN" --keep-alive-tmo=5 \
    --reconnect-delay=1 --ctrl-loss-tmo=-1 || die "nvme connect-all through a's discovery failed"
for _ in $(seq 50); do [ "$(nvme list-subsys 2>/dev/null | grep -c ' live')" -ge 2 ] && break; sleep 0.1; done
NS1= NS2=
for _ in $(seq 100); do NS1=$(head_of 1); NS2=$(head_of 2); [ -n "$NS1" ] && [ -n "$NS2" ] && break; sleep 0.1; done
[ -n "$NS1" ] && [ -n "$NS2" ] || { ls -l /sys/block/; die "no multipath head devices for namespaces 1 and 2"; }
sleep 2
echo "---- nvme list-subsys, before"
nvme list-subsys "$NS1" | tee /tmp/ns1-before
nvme list-subsys "$NS2" > /tmp/ns2-before
check "namespace 1: two live paths" [ "$(grep -c ' live' /tmp/ns1-before)" = 2 ]
check "namespace 1 is optimized through controller a's port ($PA)" grep -q "trsvcid=$PA.* live optimized" /tmp/ns1-before
check "... and non-optimized through b's ($PB)" grep -q "trsvcid=$PB.* live non-optimized" /tmp/ns1-before
check "namespace 2 is optimized through controller b's port" grep -q "trsvcid=$PB.* live optimized" /tmp/ns2-before

mkfs.ext4 -F -q "$NS1" || die "mkfs.ext4 on $NS1 failed"
mkdir -p "$MNT"
mount -t ext4 "$NS1" "$MNT" || die "mount failed"
touch /share/ready
log "fio rounds on $MNT until the host says stop"
round=0
while [ ! -e /share/stop ] && [ "$round" -lt 200 ]; do
    round=$((round + 1))
    fio --name=n2r$round --filename="$NS2" --offset=$(( (round % 8) * 16 ))M --size=16M --bs=4k --rw=randwrite \
        --ioengine=libaio --iodepth=4 --direct=1 --verify=crc32c --verify_fatal=1 --output-format=terse > /tmp/fio2.out 2>&1 &
    ns2=$!
    fio --name=r$round --directory="$MNT" --numjobs=4 --size=8M --bs=4k --rw=randwrite --ioengine=libaio --iodepth=8 \
        --direct=1 --verify=crc32c --verify_fatal=1 --group_reporting --output-format=terse > /tmp/fio.out 2>&1
    rc=$?
    wait $ns2; rc2=$?
    errors2=$(awk -F';' 'NR==1 {print $5}' /tmp/fio2.out)
    echo "RESULT round $round namespace 2 raw fio rc=$rc2 errors=${errors2:-?}"
    if [ "$rc2" != 0 ] || [ "${errors2:-1}" != 0 ]; then
        echo "FAIL: fio round $round on namespace 2 (rc $rc2, errors ${errors2:-?})"; tail -n 20 /tmp/fio2.out; failed=1
    fi
    errors=$(awk -F';' 'NR==1 {print $5}' /tmp/fio.out)
    echo "RESULT round $round $(log) namespace 1 ext4 fio rc=$rc errors=${errors:-?} paths: $(paths "$NS1" | awk '{print $3, $5, $6}' | tr '\n' ' ')"
    if [ "$rc" != 0 ] || [ "${errors:-1}" != 0 ]; then
        echo "FAIL: fio round $round (rc $rc, errors ${errors:-?})"; tail -n 20 /tmp/fio.out; failed=1
    fi
    [ -e /share/note ] && { echo "host: $(cat /share/note)"; rm -f /share/note; }
done
check "fio ran more than one round" [ "$round" -gt 1 ]
sleep 3
echo "---- nvme list-subsys, after"
nvme list-subsys "$NS1" | tee /tmp/ns1-after
check "after: namespace 1 has both paths live again" [ "$(grep -c ' live' /tmp/ns1-after)" = 2 ]
check "after: namespace 1 is optimized through a's port again" grep -q "trsvcid=$PA.* live optimized" /tmp/ns1-after
check "the host's namespace rescans (at each ANA and namespace event) never failed" sh -c "! dmesg | grep -q 'Identify namespace failed'"
check "no I/O error reached the namespace or the file system" sh -c "! dmesg | grep -E 'I/O error, dev nvme[0-9]+n|EXT4-fs error|Buffer I/O error'"
umount "$MNT" || { echo "FAIL: umount"; failed=1; }
check "fsck finds the file system clean" fsck.ext4 -n -f "$NS1"
# The disconnect deletes each path's controller (a shutdown through CC.SHN,
# then the queues close). It runs in the background with a bound: a
# disconnect that never returns is a failure to show, with where the
# kernel waits (sysrq w: the blocked tasks' stacks), not a silent hang
# until the host's timeout kills the guest.
nvme disconnect -n "$NQN" >/tmp/disconnect.out 2>&1 &
disconnect=$!
waited=0
while kill -0 "$disconnect" 2>/dev/null && [ "$waited" -lt 120 ]; do sleep 1; waited=$((waited + 1)); done
if kill -0 "$disconnect" 2>/dev/null; then
    echo "FAIL: nvme disconnect did not return within 120 s; the paths meanwhile:"; failed=1
    nvme list-subsys 2>&1 | head -20
    echo "---- its kernel stack"; cat /proc/"$disconnect"/stack 2>&1
    echo w > /proc/sysrq-trigger
    echo "---- the blocked tasks (sysrq w)"; dmesg | sed -n '/sysrq: Show Blocked State/,$p' | tail -n 80
else
    check "nvme disconnect returned (in ${waited} s)" wait "$disconnect"
fi
echo "---- nvme lines of dmesg"
dmesg | grep -i -E 'nvme' | tail -n 50
exit "$failed"
