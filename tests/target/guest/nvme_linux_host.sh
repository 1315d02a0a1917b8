#!/bin/bash
# Guest command script (runs INSIDE the Debian 12 test guest of
# /work/shared/guest, through run-guest.sh): the Linux kernel's NVMe/TCP
# host (nvme-tcp + nvme-cli) against Strata's NVMe/TCP target on the host,
# reached as 10.0.2.2:PORT. The host side is ../guest_nvme_test.sh.
#
#   (a) nvme discover: the subsystem is listed at the port
#   (b) a host NQN not allowed is refused; nvme connect with the allowed one
#   (c) nvme list, id-ctrl, id-ns, list-subsys (ANA state), ns-descs
#   (d) mkfs.ext4, mount, files, fio --verify=crc32c with 4 jobs on 2 queues
#   (e) disconnect and connect again: the files and fio's data survived
#   (f) disconnect in mid-I/O: fio ends, nothing hangs, the device works again
#   (g) keep alive: the controller lives while idle past its KATO
#   (h) no unexpected I/O or transport error in dmesg so far
#   (i) the target frozen 12 s in mid-I/O: keep alive times out, the host
#       recovers, fio's writes and verify pass
#   (j) the target restarted: the host reconnects, the namespace works
#
# Every check prints "ok: ..." or "FAIL: ..."; the exit status is non-zero
# if any failed. A failure later steps cannot survive dumps dmesg and exits.
#
# args: PORT SUBSYSTEM_NQN HOST_NQN
# Needs mkfs.ext4 in the guest and ext4.ko shared at /share/modules (host_lib.sh).
. "$GUEST_LIB"
set -u
if [ $# -ne 3 ]; then
    echo "FAIL: usage: $0 PORT SUBSYSTEM_NQN HOST_NQN"
    exit 2
fi
PORT=$1 NQN=$2 HOSTNQN=$3
MNT=/mnt/strata
SUMS=/tmp/files.sha256
failed=0

diagnostics() {
    echo "---- nvme list-subsys"; nvme list-subsys 2>&1 | head -n 30
    echo "---- nvme lines in dmesg"; dmesg | grep -i nvme | tail -n 40
    echo "---- dmesg (tail)"; dmesg | tail -n 40
}
. /share/strata_guest.sh  # step, refused, check, bounded, load_ext4
die() { echo "FAIL: $* -- cannot go on"; diagnostics; exit 1; }
find_dev() {
    local d=""
    for _ in $(seq 100); do d=$(nvme_dev_for_nqn "$NQN") && [ -b "$d" ] && break; d=""; sleep 0.1; done
    echo "$d"
}
dev_gone() { for _ in $(seq 100); do nvme_dev_for_nqn "$NQN" >/dev/null || return 0; sleep 0.1; done; return 1; }
connect() { nvme connect -t tcp -a "$HOST_IP" -s "$PORT" -n "$NQN" --hostnqn="$HOSTNQN" --nr-io-queues=2 --keep-alive-tmo=5 --reconnect-delay=1 "$@"; }
disconnect() { nvme disconnect -n "$NQN"; }
write_files() {
    mkdir -p "$MNT/data" &&
    for i in $(seq 1 16); do head -c $((i * 7919)) /dev/urandom > "$MNT/data/small.$i" || return 1; done &&
    head -c $((6 * 1024 * 1024)) /dev/urandom > "$MNT/data/big.bin" &&
    (cd "$MNT" && sha256sum data/*) > "$SUMS"
}
fio_verify() {  # 4 jobs, QD 16 each, 4k-64k random writes, crc32c verify
    fio --name=crc --directory="$MNT" --size=8M --numjobs=4 --bsrange=4k-64k --rw=randwrite --direct=1 \
        --ioengine=libaio --iodepth=16 --randrepeat=1 --verify=crc32c --verify_fatal=1 \
        --verify_state_save=0 --group_reporting --output-format=normal "$@" >/tmp/fio.out 2>&1
}
export NQN HOSTNQN PORT HOST_IP MNT SUMS
export -f log nvme_dev_for_nqn connect disconnect write_files fio_verify load_ext4

modprobe -q nvme-tcp || die "cannot load nvme-tcp"
dmesg_mark=$(dmesg | wc -l)

# ---- (a) discovery
if step "nvme discover -t tcp -a $HOST_IP -s $PORT" nvme discover -t tcp -a "$HOST_IP" -s "$PORT" --hostnqn="$HOSTNQN"; then
    sed 's/^/    /' /tmp/step.out | grep -E 'subnqn|trsvcid|subtype|traddr' | head -n 12
    check "discovery lists $NQN" grep -q -F "subnqn:  $NQN" /tmp/step.out
fi

# ---- (b) the host allow-list, then the connection
refused "nvme connect from a host NQN not allowed is refused" \
    nvme connect -t tcp -a "$HOST_IP" -s "$PORT" -n "$NQN" --hostnqn=nqn.2014-08.org.example:intruder
check "no controller after the refusal" bash -c '! nvme_dev_for_nqn "$NQN" >/dev/null'
step "nvme connect -n $NQN (2 I/O queues, keep alive 5 s)" connect || die "connect failed"
DEV=$(find_dev)
[ -n "$DEV" ] || die "no namespace block device for $NQN"
echo "ok: namespace $DEV ($(blockdev --getsize64 "$DEV") bytes, $(blockdev --getss "$DEV")-byte blocks)"

# ---- (c) what the host sees
step "nvme list" nvme list && sed 's/^/    /' /tmp/step.out
step "nvme list-subsys" nvme list-subsys "$DEV" && sed 's/^/    /' /tmp/step.out
check "list-subsys shows the path live and optimized" grep -q -E 'live.*optimized|optimized.*live' /tmp/step.out
if step "nvme id-ctrl" nvme id-ctrl "$DEV"; then
    grep -E '^(mn|sn|fr|subnqn|cntlid|mdts|cmic|anatt|anacap|oncs|fuses|vwc|ioccsz|kas|cntrltype) ' /tmp/step.out | sed 's/^/    /'
    check "id-ctrl subnqn is $NQN" grep -q -E "^subnqn +: $NQN\$" /tmp/step.out
    check "id-ctrl reports ANA (cmic bit 3)" bash -c "awk '\$1==\"cmic\"{print \$3}' /tmp/step.out | grep -q -E '0x[0-9a-f]*[89a-f]\$'"
fi
if step "nvme id-ns" nvme id-ns "$DEV"; then
    grep -E '^(nsze|ncap|nuse|nsfeat|nmic|dlfeat|anagrpid|nguid|lbaf  0) ' /tmp/step.out | sed 's/^/    /'
fi
step "nvme ns-descs" nvme ns-descs "$DEV" && sed 's/^/    /' /tmp/step.out | head -n 4

# ---- (d) ext4, files, fio
mkdir -p "$MNT"
step "ext4 module loaded" load_ext4 || die "no ext4"
step "mkfs.ext4 on $DEV" mkfs.ext4 -F -q "$DEV" || die "mkfs.ext4 failed"
step "mount $DEV" mount -t ext4 "$DEV" "$MNT" || die "mount failed"
step "wrote 17 files (7 MiB) and recorded their SHA-256" write_files
step "sync" sync
echo 3 > /proc/sys/vm/drop_caches
step "files read back match (page cache dropped)" bash -c "cd '$MNT' && sha256sum --quiet -c '$SUMS'"
if step "fio: 4 jobs x QD16 random writes 4k-64k, --verify=crc32c" fio_verify; then
    grep -E 'write: IOPS|read: IOPS|err=' /tmp/fio.out | sed 's/^/    /'
fi
check "fio reported no errors" bash -c "grep -q 'err= 0' /tmp/fio.out && ! grep -q 'verify:.*bad' /tmp/fio.out"

# ---- (e) disconnect, connect again: the data is the same
step "umount" umount "$MNT"
step "nvme disconnect" disconnect
check "the namespace is gone after disconnect" dev_gone
step "nvme connect again" connect || die "reconnect failed"
DEV=$(find_dev)
[ -n "$DEV" ] || die "no namespace after reconnecting"
step "mount again" mount -t ext4 "$DEV" "$MNT" || die "mount after reconnect failed"
step "the files survived the reconnect" bash -c "cd '$MNT' && sha256sum --quiet -c '$SUMS'"
step "fio's data verifies after the reconnect" fio_verify --verify_only

# ---- (f) a disconnect in mid-I/O (raw writes: the file system is done),
# then connect again: the device reads and writes, and verifies
step "umount" umount "$MNT"
fio --name=mid --filename="$DEV" --size=32M --bs=16k --rw=randwrite --direct=1 --ioengine=libaio \
    --iodepth=32 --time_based --runtime=30 --output-format=terse >/tmp/mid.out 2>&1 &
fio_pid=$!
sleep 3
step "nvme disconnect while fio writes" disconnect
for _ in $(seq 300); do kill -0 "$fio_pid" 2>/dev/null || break; sleep 0.1; done
check "fio ended after the disconnect (no hang)" bash -c "! kill -0 $fio_pid 2>/dev/null"
kill -9 "$fio_pid" 2>/dev/null; wait "$fio_pid" 2>/dev/null
check "the namespace is gone" dev_gone
step "nvme connect after the mid-I/O disconnect" connect || die "connect after the mid-I/O disconnect failed"
DEV=$(find_dev)
[ -n "$DEV" ] || die "no namespace after the mid-I/O disconnect"
step "fio --verify=crc32c on the raw device after the mid-I/O disconnect" \
    fio --name=after --filename="$DEV" --size=16M --bs=8k --rw=randwrite --direct=1 --ioengine=libaio \
        --iodepth=32 --verify=crc32c --verify_fatal=1 --verify_state_save=0 --output-format=terse

# ---- (g) keep alive: idle for longer than the 5 s KATO, the controller stays
sleep 12
check "the controller is still live after 12 s idle (keep alive)" bash -c "nvme list-subsys '$DEV' | grep -q live"
step "a read after the idle time" dd if="$DEV" of=/dev/null bs=4k count=16 iflag=direct

step "nvme disconnect" disconnect
check "no controller left" dev_gone

# ---- (h) the kernel's log: nothing went wrong but what (f) provoked
dmesg | tail -n +"$((dmesg_mark + 1))" | grep -i -E 'nvme|I/O error|blk_update' > /tmp/dmesg.nvme
grep -i -E 'error|fail|timeout|reset' /tmp/dmesg.nvme | grep -v -E 'Failed reconnect|ctrl state 6' > /tmp/dmesg.bad
echo "---- nvme lines in dmesg"; sed 's/^/    /' /tmp/dmesg.nvme | tail -n 40
if [ -s /tmp/dmesg.bad ]; then
    echo "note: errors in dmesg (the disconnect in mid-I/O provokes some; judge them):"
    sed 's/^/    /' /tmp/dmesg.bad
fi
check "no command failed with a status from the target (I/O Error (sct ...) in dmesg)" bash -c "! grep -q 'I/O Error (sct' /tmp/dmesg.nvme"
check "no keep alive timeout or controller reset in dmesg" bash -c "! grep -q -i -E 'keep-alive|keep alive|resetting controller' /tmp/dmesg.nvme"

# Waits (at most $2 s) for the host side to write /share/$1.
await_host() { for _ in $(seq $(($2 * 10))); do [ -e "/share/$1" ] && return 0; sleep 0.1; done; return 1; }

# ---- (i) the target freezes (SIGSTOP, 12 s) in mid-I/O: the host's keep
# alive times out, it recovers and reconnects once the target is back,
# and fio's writes and verify end without an error
step "nvme connect for the frozen-target case" connect || die "connect failed"
DEV=$(find_dev)
[ -n "$DEV" ] || die "no namespace"
ka_mark=$(dmesg | wc -l)
fio --name=frozen --filename="$DEV" --size=32M --bs=16k --rw=randwrite --direct=1 --ioengine=libaio --iodepth=16 \
    --verify=crc32c --verify_fatal=1 --verify_state_save=0 --output-format=terse >/tmp/frozen.out 2>&1 &
fio_pid=$!
sleep 1
touch /share/freeze
check "the host side froze the target and thawed it" await_host thawed 60
wait "$fio_pid"; frc=$?
check "fio across the frozen target: no error, verify passes (exit $frc, errors $(awk -F';' 'NR==1 {print $5}' /tmp/frozen.out))" \
    bash -c "[ $frc = 0 ] && [ \"\$(awk -F';' 'NR==1 {print \$5}' /tmp/frozen.out)\" = 0 ]"
dmesg | tail -n +"$((ka_mark + 1))" | grep -i nvme > /tmp/dmesg.ka
sed 's/^/    /' /tmp/dmesg.ka | head -n 12
check "the host saw the target go silent (a timeout, then error recovery)" grep -q -i -E 'timeout|error recovery' /tmp/dmesg.ka
check "... and reconnected" grep -q -i 'reconnected' /tmp/dmesg.ka

# ---- (j) the target restarts (SIGTERM, started again on the same port):
# the host reconnects by itself, and the namespace reads and writes again
# (its memory volume starts empty: the tool's, not the array's)
touch /share/restart
check "the host side restarted the target" await_host restarted 60
ok_again() { dd if="$DEV" of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null && nvme list-subsys "$DEV" | grep -q live; }
for _ in $(seq 60); do ok_again && break; sleep 0.5; done
check "the host reconnected to the restarted target" ok_again
step "fio --verify=crc32c after the restart" \
    fio --name=restarted --filename="$DEV" --size=16M --bs=8k --rw=randwrite --direct=1 --ioengine=libaio \
        --iodepth=16 --verify=crc32c --verify_fatal=1 --verify_state_save=0 --output-format=terse
step "nvme disconnect" disconnect
check "no controller left" dev_gone

[ "$failed" = 0 ] && echo "PASS: the Linux NVMe/TCP host against Strata's target"
exit "$failed"
