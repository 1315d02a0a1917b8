#!/bin/bash
# Guest command script (runs INSIDE the Debian 12 test guest of
# /work/shared/guest, through run-guest.sh): the Linux kernel's iSCSI
# initiator (open-iscsi + iscsi_tcp) against Strata's iSCSI target on the
# host, reached as 10.0.2.2:PORT. The host side is ../guest_iscsi_test.sh.
#
#   (a) SendTargets discovery with discovery CHAP (from the discovery db);
#       discovery without CHAP and with a wrong secret must fail
#   (b) login with CHAP + mutual CHAP
#   (c) logins with a wrong CHAP secret, and with a wrong mutual (target)
#       secret, must fail
#   (d) mkfs.ext4, mount, write files, sync, read back, fio --verify=crc32c
#   (e) logout, login again, fsck, remount, the files and fio's data survived
#   (f) unmount, logout, no session left, no I/O or connection errors in dmesg
#
# Every check prints "ok: ..." or "FAIL: ..."; the exit status is non-zero
# if any failed. A failure that later steps cannot survive (no login, no
# disk, no mount) dumps dmesg and iscsid's log and exits at once.
#
# args: PORT TARGET_IQN INITIATOR_IQN CHAP_USER CHAP_SECRET
#       MUTUAL_USER MUTUAL_SECRET DISCOVERY_USER DISCOVERY_SECRET
# Needs mkfs.ext4 in the guest (run-guest.sh with GUEST_EXTRA_PKGS=e2fsprogs)
# and, as the image has no ext4 module, ext4.ko and its dependencies shared
# at /share/modules with a load-order file /share/modules/order, and
# /share/strata_guest.sh (-s DIR; host_lib.sh's guest_prepare).
. "$GUEST_LIB"
set -u
if [ $# -ne 9 ]; then
    echo "FAIL: usage: $0 PORT TARGET_IQN INITIATOR_IQN CHAP_USER CHAP_SECRET MUTUAL_USER MUTUAL_SECRET DISC_USER DISC_SECRET"
    exit 2
fi
PORT=$1 IQN=$2 INI=$3 CU=$4 CS=$5 MU=$6 MS=$7 DU=$8 DS=$9
P=$HOST_IP:$PORT
MNT=/mnt/strata
SUMS=/tmp/files.sha256   # kept in the guest's tmpfs, not on the disk under test
failed=0
exec 3>&1   # the console, for timestamps from inside steps whose output is captured

diagnostics() {
    echo "---- iscsiadm -m session -P 3"; iscsiadm -m session -P 3 2>&1 | sed -n '1,60p'
    echo "---- iscsid log (tail)"; tail -n 40 /tmp/iscsid.log 2>/dev/null
    echo "---- iSCSI lines in dmesg"; dmesg | grep -i -E 'iscsi|connection[0-9]|session[0-9]|sd [0-9]' | tail -n 40
    echo "---- dmesg (tail)"; dmesg | tail -n 60
}
. /share/strata_guest.sh  # step, refused, check, bounded, load_ext4 (guest_prepare put it there)
die() { echo "FAIL: $* -- cannot go on"; diagnostics; exit 1; }
sessions() { iscsiadm -m session 2>/dev/null | grep -c -F "$IQN"; }
no_session() { [ "$(sessions)" = 0 ]; }
node_set() { iscsiadm -m node -T "$IQN" -p "$P" -o update -n "$1" -v "$2" || die "cannot set $1 in the node record"; }
node_login() { log "login" >&3; iscsiadm -m node -T "$IQN" -p "$P" --login; }
node_logout() { log "logout" >&3; iscsiadm -m node -T "$IQN" -p "$P" --logout; }
# the disk of the session (empty if none within 20 s)
find_disk() {
    local d=""
    for _ in $(seq 200); do
        d=$(iscsi_disk_for_iqn "$IQN")
        [ -n "$d" ] && [ -b "$d" ] && break
        d=""; sleep 0.1
    done
    echo "$d"
}
disk_gone() {  # wait until no SCSI disk of the target is left
    for _ in $(seq 100); do [ -z "$(iscsi_disk_for_iqn "$IQN")" ] && return 0; sleep 0.1; done
    return 1
}
fio_verify() {  # fio_verify [extra fio args]: 8 MiB file, 4k random writes, crc32c verify
    fio --name=crc --filename="$MNT/fio.dat" --size=8M --bs=4k --rw=randwrite --direct=1 \
        --ioengine=libaio --iodepth=8 --randrepeat=1 --verify=crc32c --verify_fatal=1 \
        --verify_state_save=0 --output-format=terse "$@" >/tmp/fio.out 2>&1
}
# The legacy "iscsiadm -m discovery -t st -p" (re)creates its discovery db
# record from iscsid.conf's discovery.sendtargets.* defaults, so that is where
# its discovery CHAP goes; "-m discoverydb ... --discover" uses the record.
disc_conf() {  # disc_conf None | disc_conf CHAP USER SECRET
    sed -i '/^discovery\.sendtargets\.auth\./d' /etc/iscsi/iscsid.conf
    {
        echo "discovery.sendtargets.auth.authmethod = $1"
        [ "$1" = CHAP ] && echo "discovery.sendtargets.auth.username = $2" && echo "discovery.sendtargets.auth.password = $3"
    } >> /etc/iscsi/iscsid.conf
}
discover() { iscsiadm -m discovery -t st -p "$P"; }
write_files() {
    mkdir -p "$MNT/data" &&
    for i in $(seq 1 16); do head -c $((i * 7919)) /dev/urandom > "$MNT/data/small.$i" || return 1; done &&
    head -c $((6 * 1024 * 1024)) /dev/urandom > "$MNT/data/big.bin" &&
    echo "written by the Linux initiator through Strata's target" > "$MNT/data/note.txt" &&
    (cd "$MNT" && sha256sum data/*) > "$SUMS"
}

export IQN P MNT SUMS
export -f log iscsi_disk_for_iqn node_login node_logout write_files fio_verify discover load_ext4

# ---- iscsid with a fixed initiator name (the host's --acl names it)
modprobe -q -a iscsi_tcp sd_mod sg || die "cannot load iscsi_tcp/sd_mod/sg"
echo "InitiatorName=$INI" > /etc/iscsi/initiatorname.iscsi
iscsid -f >/tmp/iscsid.log 2>&1 &
for _ in $(seq 100); do grep -q ISCSIADM_ABSTRACT_NAMESPACE /proc/net/unix && break; sleep 0.1; done
grep -q ISCSIADM_ABSTRACT_NAMESPACE /proc/net/unix || die "iscsid did not start"
log "iscsid up as $INI; target $IQN at $P"

# ---- (a) SendTargets discovery with discovery CHAP
disc_conf None
refused "discovery without CHAP is refused" discover
check "... as an authorization failure (iscsiadm exit 24, got $refused_rc)" [ "$refused_rc" = 24 ]
disc_conf CHAP "$DU" "${DS}x"
refused "discovery with a wrong discovery CHAP secret is refused" discover
check "... as an authorization failure (iscsiadm exit 24, got $refused_rc)" [ "$refused_rc" = 24 ]
disc_conf CHAP "$DU" "$DS"
if step "iscsiadm -m discovery -t st -p $P with discovery CHAP" discover; then
    sed 's/^/    /' /tmp/step.out
    check "discovery lists $IQN" grep -q -F " $IQN" /tmp/step.out
fi
check "the discovery db record carries CHAP" bash -c \
    "iscsiadm -m discoverydb -t st -p '$P' -o show | grep -q '^discovery.sendtargets.auth.authmethod = CHAP'"
# the same through a discovery db record of its own, with iscsid.conf back to no CHAP
disc_conf None
iscsiadm -m discoverydb -t st -p "$P" -o delete >/dev/null 2>&1
step "discoverydb record created" iscsiadm -m discoverydb -t st -p "$P" -o new
step "discoverydb record set to CHAP" bash -c "
    iscsiadm -m discoverydb -t st -p '$P' -o update -n discovery.sendtargets.auth.authmethod -v CHAP &&
    iscsiadm -m discoverydb -t st -p '$P' -o update -n discovery.sendtargets.auth.username -v '$DU' &&
    iscsiadm -m discoverydb -t st -p '$P' -o update -n discovery.sendtargets.auth.password -v '$DS'"
if step "iscsiadm -m discoverydb -t st -p $P --discover with the record's CHAP" \
        iscsiadm -m discoverydb -t st -p "$P" --discover; then
    check "discoverydb lists $IQN" grep -q -F " $IQN" /tmp/step.out
fi
# The target reports the portal it listens on (the host's 127.0.0.1:PORT); in
# the guest that is its own loopback, so log in through 10.0.2.2 instead.
iscsiadm -m node -T "$IQN" -o delete >/dev/null 2>&1
step "node record for $IQN at $P created" iscsiadm -m node -o new -T "$IQN" -p "$P" || die "no node record"
step "node record set to CHAP + mutual CHAP" bash -c "
    iscsiadm -m node -T '$IQN' -p '$P' -o update -n node.session.auth.authmethod -v CHAP &&
    iscsiadm -m node -T '$IQN' -p '$P' -o update -n node.session.auth.username -v '$CU' &&
    iscsiadm -m node -T '$IQN' -p '$P' -o update -n node.session.auth.username_in -v '$MU' &&
    iscsiadm -m node -T '$IQN' -p '$P' -o update -n node.session.auth.password_in -v '$MS'" || die "cannot set up the node record"

# ---- (c) wrong secrets must be refused
node_set node.session.auth.password "${CS}x"
if refused "login with a wrong CHAP secret is refused" node_login; then
    # 24 = ISCSI_ERR_LOGIN_AUTH_FAILED: the target answered "authentication failure"
    check "the refusal is an authorization failure (iscsiadm exit 24, got $refused_rc)" [ "$refused_rc" = 24 ]
fi
check "no session after the wrong CHAP secret" no_session
node_set node.session.auth.password "$CS"
node_set node.session.auth.password_in "${MS}x"
refused "login is refused when the target cannot prove the mutual CHAP secret" node_login
check "no session after the wrong mutual CHAP secret" no_session
node_set node.session.auth.password_in "$MS"

# ---- (b) login with CHAP + mutual CHAP
# The refused logins above may leave "detected conn error (1020)" (TCP closed)
# in dmesg: the peer closed the connection of a failed login, as it must.
# From here on the kernel must log no connection or I/O error at all.
dmesg_mark=$(dmesg | wc -l)
dmesg | grep -F 'detected conn error' | sed 's/^/note: during the refused logins: /'
step "login with CHAP and mutual CHAP" node_login || die "login failed"
check "one session to $IQN" [ "$(sessions)" = 1 ]
iscsiadm -m session -P 2 2>/dev/null | grep -E 'Target:|Current Portal|iSCSI Session State|username|HeaderDigest|MaxRecvDataSegmentLength|FirstBurstLength|MaxBurstLength|ImmediateData|InitialR2T' | sed 's/^[[:space:]]*/    /'
DEV=$(find_disk)
[ -n "$DEV" ] || { lsscsi -t; die "no SCSI disk for $IQN"; }
echo "ok: disk $DEV ($(blockdev --getsize64 "$DEV") bytes)"
check "INQUIRY names the vendor STRATA" bash -c "sg_inq '$DEV' | grep -q 'Vendor identification: STRATA'"

# ---- (d) ext4, files, fio with crc32c verification
mkdir -p "$MNT"
step "ext4 module loaded" load_ext4 || die "no ext4 in the guest kernel"
step "mkfs.ext4 on $DEV" mkfs.ext4 -F -q -b 4096 "$DEV" || die "mkfs.ext4 failed"
step "mount $DEV" mount -t ext4 "$DEV" "$MNT" || die "mount failed"
step "wrote 18 files (6.1 MiB) and recorded their SHA-256" write_files
step "sync" sync
echo 3 > /proc/sys/vm/drop_caches
step "files read back from the target match (page cache dropped)" bash -c "cd '$MNT' && sha256sum --quiet -c '$SUMS'"
log "fio: 8 MiB, 4k random writes QD8, crc32c verify"
if step "fio --verify=crc32c (randwrite + verify)" fio_verify; then
    awk -F';' '{printf "    fio: write IOPS=%s, verify read KiB=%s, errors=%s\n", $49, $6, $5}' /tmp/fio.out
else
    sed 's/^/    /' /tmp/fio.out | tail -n 20
fi
step "sync after fio" sync

# ---- (e) logout, login again, the data survived
step "umount" umount "$MNT" || die "umount failed"
step "logout" node_logout
check "no session after logout" no_session
check "the disk went away after logout" disk_gone
step "login again" node_login || die "second login failed"
DEV=$(find_disk)
[ -n "$DEV" ] || { lsscsi -t; die "no SCSI disk after the second login"; }
echo "ok: disk after the second login: $DEV"
step "fsck.ext4 -fn finds the file system clean" fsck.ext4 -fn "$DEV"
step "mount again" mount -t ext4 "$DEV" "$MNT" || die "second mount failed"
step "the files survived logout/login (SHA-256)" bash -c "cd '$MNT' && sha256sum --quiet -c '$SUMS'"
step "fio's data survived logout/login (crc32c verify_only)" fio_verify --verify_only

# ---- (f) unmount, logout
step "final umount" umount "$MNT"
step "final logout" node_logout
check "no session left" no_session
# Since the good login the kernel must have logged no I/O, connection or
# file system errors: logins, logouts and I/O were clean. One exception, on
# the initiator's side: libiscsi may refuse iscsid's next login PDU while its
# transmit path still holds the previous one ("Login/Text in progress. Cannot
# start new task", a known race of the Linux initiator, open-iscsi issue
# #424; seen here once in ~50 runs under TCG); iscsid then drops that TCP
# connection (conn error 1020) and retries the login. That connection's 1020
# is reported as a note, not a failure; the login itself must still succeed.
dmesg | tail -n +"$((dmesg_mark + 1))" > /tmp/dmesg.txt
raced=$(grep -o 'connection[0-9]*:[0-9]*: Login/Text in progress' /tmp/dmesg.txt | cut -d: -f1,2 | sort -u)
grep -E -i 'I/O error|detected conn error|blk_update_request|EXT4-fs error|Buffer I/O|iscsi.*(timed out|timeout|abort)' \
    /tmp/dmesg.txt > /tmp/dmesg.errors
: > /tmp/dmesg.bad
while IFS= read -r line; do
    conn=$(echo "$line" | grep -o 'connection[0-9]*:[0-9]*: detected conn error (1020)' | cut -d: -f1,2)
    if [ -n "$conn" ] && echo "$raced" | grep -qx "$conn"; then
        echo "note: initiator-side login race, retried by iscsid: $(grep -F "$conn: Login/Text" /tmp/dmesg.txt | head -n1) / $line"
    else
        echo "$line" >> /tmp/dmesg.bad
    fi
done < /tmp/dmesg.errors
if [ -s /tmp/dmesg.bad ]; then
    echo "FAIL: the kernel logged errors:"; sed 's/^/    /' /tmp/dmesg.bad | tail -n 20; failed=1
else
    echo "ok: no I/O, connection or file system errors in dmesg since the first good login"
fi
if [ "$failed" != 0 ]; then
    diagnostics
    echo "FAIL: at least one check failed"
    exit 1
fi
echo "ok: all checks passed"
exit 0
