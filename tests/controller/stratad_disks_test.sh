#!/usr/bin/env bash
# Disks and groups managed through stratad, end to end with real processes
# (stratad on a small shelf, the strata CLI, grpcurl, qemu-io over iSCSI):
# a simulated disk added and made a hot spare, a member failed by command
# and rebuilt onto the spare with no other command, a second failure
# carried and a third refused, a rebuild cut short by SIGTERM that starts
# again by itself, scrubs started and cancelled, a SIGTERM during the
# resync after a kill -9 that stops promptly, every refusal with its
# status, and the pattern written first read back at each step.
#   stratad_disks_test.sh PATH/TO/stratad PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
for tool in qemu-io grpcurl; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (tools/install-deps.sh installs it)"; exit 77; }
done
state=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$state"' EXIT
port=$((20000 + RANDOM % 12000))  # below Linux's ephemeral ports (32768 and up), which outgoing connections take
api=127.0.0.1:$((port + 2))
url="iscsi://127.0.0.1:$port/iqn.2026-11.io.strata:array/1"
s() { "$cli" --api "$api" "$@"; }

start() {
  "$stratad" --state-dir "$state" --iscsi "127.0.0.1:$port" --grpc "$api" --small-shelf >"$state/$1.out" 2>"$state/$1.err" &
  pid=$!
  wait_ready "$state/$1.out" "$state/$1.err"
}
# state_of DISK|GROUP: its STATE column
disk_state() { s disk show "$1" | awk 'NR == 2 { print $6 }'; }  # SIZE is two words
group_state() { s group show "$1" | awk 'NR == 2 { print $3 }'; }
# until_op_ends OP [SECONDS]: polls the operation, prints its final state
until_op_ends() {
  local state
  for _ in $(seq $((${2:-180} * 5))); do
    state=$(s --json op show "$1" | sed -n 's/.*"state":"\([A-Z]*\)".*/\1/p')
    [[ "$state" != RUNNING ]] && { echo "$state"; return; }
    sleep 0.2
  done
  echo TIMEOUT
}
# refused EXPECTED_TEXT CLI-ARGS...: exit 1 and the text on stderr
refused() { local text=$1; shift; s "$@" >/dev/null 2>"$state/cli.err"; [[ $? -eq 1 ]] && grep -q "$text" "$state/cli.err"; }
# The pattern read back whole, in 1 MiB requests, and in 64 KiB ones at
# offsets that are not 1 MiB-aligned. qemu 7.2's iSCSI driver asserts on a
# read of 32 KiB or more from a thin LUN of 4 KiB blocks (its block-status
# probe is not 4 KiB-aligned); volumes are 512e by default, which it reads.
pattern_reads() {
  local reads=()
  for mib in $(seq 0 31); do reads+=(-c "read -P 0x5a ${mib}M 1M" -c "read -P 0x5a $((mib * 1024 + 448))k 64k"); done
  for mib in $(seq 512 519); do reads+=(-c "read -P 0xc3 ${mib}M 1M"); done
  qemu-io -f raw "${reads[@]}" "$url" >/dev/null
}

start first
# A volume on the capacity tier (the RAID-6 groups), served as LUN 1.
quiet s volume create vc --size 1G --affinity capacity
quiet s map vc --lun 1
check "vc is 512e: 512-byte blocks, 8 per physical block" bash -c \
  "iscsi-readcapacity16 $url | grep -q 'LOGICAL BLOCK LENGTH IN BYTES:512' && iscsi-readcapacity16 $url | grep -q 'LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT:3'"
check "qemu-io reads a fresh thin 512e LUN in 1 MiB and 64 KiB requests (zeros)" \
  quiet qemu-io -f raw -c 'read -P 0 0 1M' -c 'read -P 0 100M 1M' -c 'read -P 0 200M 64k' -c 'read -P 0 300M 32k' "$url"
# 4Kn stays a choice: --block-size 4096 (anything else refused, naming the field).
check "refused (CLI): --block-size 1024" bash -c "'$cli' --api $api volume create v4k --size 1G --block-size 1024 2>&1 | grep -q 'block-size 1024 is not 512 or 4096'"
check "refused (grpcurl): block_size_bytes 1024, naming the field" bash -c \
  "grpcurl -plaintext -d '{\"parent\":\"pools/p1\",\"volume_id\":\"vx\",\"volume\":{\"size_bytes\":\"1073741824\",\"block_size_bytes\":1024}}' $api strata.v1.Array/CreateVolume 2>&1 | grep -q 'Message: volume.block_size_bytes: 1024 is not 512'"
check "strata volume create v4k --block-size 4096" bash -c "'$cli' --api $api volume create v4k --size 1G --block-size 4096 | grep -q '^pools/p1/volumes/v4k .* 4096 '"
quiet s map v4k --lun 5
check "v4k is 4Kn: 4096-byte blocks, one per physical block" bash -c \
  "iscsi-readcapacity16 ${url%/1}/5 | grep -q 'LOGICAL BLOCK LENGTH IN BYTES:4096' && iscsi-readcapacity16 ${url%/1}/5 | grep -q 'LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT:0'"
check "v4k's data is written and read back" quiet qemu-io -f raw -c 'write -P 0x4b 0 1M' -c 'read -P 0x4b 0 1M' "${url%/1}/5"
quiet s unmap v4k-all
check "a pattern is written over iSCSI to the capacity tier" \
  quiet qemu-io -f raw -c 'write -P 0x5a 0 32M' -c 'write -P 0xc3 512M 8M' "$url"
check "some of it is on groups/g1" bash -c "'$cli' --api $api heat list vc | grep -q 'CAPACITY *groups/g1'"
check "every disk is ONLINE, every group OPTIMAL" bash -c \
  "[[ \$('$cli' --api $api disk list | awk 'NR > 1 { print \$6 }' | sort -u) == ONLINE && \$('$cli' --api $api group list | awk 'NR > 1 { print \$3 }' | sort -u) == OPTIMAL ]]"

# A disk added to a new slot, made a hot spare.
check "strata disk add hdd-10 --kind hdd --size 4G: UNUSED" bash -c "'$cli' --api $api disk add hdd-10 --kind hdd --size 4G | grep -q ' UNUSED '"
check "refused: a disk that exists" refused "ALREADY_EXISTS: disk_id: disks/hdd-10 exists" disk add hdd-10 --kind hdd --size 4G
check "strata disk spare hdd-10: SPARE" bash -c "'$cli' --api $api disk spare hdd-10 | grep -q ' SPARE '"
check "refused: a group's member as a spare" refused "FAILED_PRECONDITION: disk.spare: disks/hdd-01 is a member of groups/g1" disk spare hdd-01
check "refused: replacing a working member" refused "FAILED_PRECONDITION: name: disks/hdd-03 is working: fail it first" \
  disk replace hdd-03 --with hdd-10
check "refused: a scrub of a RAID-1 group" refused "INVALID_ARGUMENT: name: groups/g3 is RAID1: a scrub checks RAID-6 parity" group scrub g3

# A failure by command: the spare takes the member's place by itself.
check "strata disk fail hdd-02: FAILED, by the administrator" bash -c "'$cli' --api $api disk fail hdd-02 | grep -q 'FAILED .*failed by the administrator'"
sleep 1
rebuild=$(s --json op list | grep -o '"name":"operations/op-[0-9]*","kind":"group.rebuild"' | tail -1 | cut -d'"' -f4)
check "the hot spare's rebuild is an operation on groups/g1 ($rebuild)" test -n "$rebuild"
check "hdd-10 is REBUILDING, as member 2 of g1" bash -c "'$cli' --api $api disk show hdd-10 | grep -q 'REBUILDING *groups/g1#2'"
check "g1 is REBUILDING, with progress" bash -c "'$cli' --api $api group show g1 | grep -q 'REBUILDING .*rebuild [0-9]*%'"
check "the pattern reads back during the rebuild" pattern_reads
check "a second failure during the rebuild is carried" quiet s disk fail hdd-00
check "refused: a third loss, which would fail the group" refused \
  "FAILED_PRECONDITION: name: disks/hdd-01: failing it would fail groups/g1" disk fail hdd-01
check "the pattern reads back with two members lost" pattern_reads
check "refused: a scrub of a degraded group" refused "FAILED_PRECONDITION: name: groups/g1 is degraded or rebuilding" group scrub g1
check "the spare's rebuild SUCCEEDED" test "$(until_op_ends "$rebuild")" = SUCCEEDED
check "hdd-10 is ONLINE in hdd-02's place; hdd-02 has LEFT" bash -c \
  "'$cli' --api $api disk show hdd-10 | grep -q 'ONLINE *groups/g1#2' && [[ \$('$cli' --api $api disk show hdd-02 | awk 'NR == 2 { print \$6 }') == LEFT ]]"
check "refused: a disk that left a group, as a spare" refused "holds a superblock of a group it left" disk spare hdd-02
check "refused: erasing a group's member" refused "FAILED_PRECONDITION: name: disks/hdd-01 is a member of groups/g1" disk erase hdd-01
check "strata disk erase hdd-02: UNUSED, blank again" bash -c "'$cli' --api $api disk erase hdd-02 | grep -q ' UNUSED '"
check "refused: erasing a blank disk" refused "INVALID_ARGUMENT: name: disks/hdd-02 holds no superblock" disk erase hdd-02

# A rebuild by command, cut short by SIGTERM: it starts again by itself.
quiet s disk replace hdd-00 --with hdd-00
check "hdd-00 is rebuilt in place: REBUILDING" test "$(disk_state hdd-00)" = REBUILDING
sleep 1
kill -TERM "$pid"; wait "$pid"
check "SIGTERM during the rebuild: exit 0" test $? -eq 0
pid=
start second
check "the restart says the rebuild resumed" bash -c "'$cli' --api $api events --limit 20 | grep -q 'onto disks/hdd-00 (resumed: the last stop cut it short)'"
resumed=$(s --json op list | grep -o '"name":"operations/op-[0-9]*","kind":"group.rebuild"' | tail -1 | cut -d'"' -f4)
check "the resumed rebuild SUCCEEDED ($resumed)" test "$(until_op_ends "$resumed")" = SUCCEEDED
check "g1 is OPTIMAL again" test "$(group_state g1)" = OPTIMAL
check "the erased hdd-02 can be a hot spare now" bash -c "'$cli' --api $api disk spare hdd-02 | grep -q ' SPARE '"
check "the pattern reads back after both rebuilds" pattern_reads

# A scrub, cancelled.
scrub=$(s --json group scrub g2 | sed -n 's/.*"name":"\(operations\/op-[0-9]*\)".*/\1/p')
check "strata group scrub g2: an operation ($scrub)" test -n "$scrub"
check "refused: a second scrub of g2" refused "FAILED_PRECONDITION: name: groups/g2 is being scrubbed already" group scrub g2
sleep 1
quiet s op cancel "$scrub"
check "strata op cancel stops the scrub: CANCELLED" test "$(until_op_ends "$scrub" 30)" = CANCELLED

# The same commands through grpcurl and reflection.
check "grpcurl lists FailDisk, ReplaceDisk and ScrubDiskGroup by reflection" bash -c \
  "grpcurl -plaintext $api list strata.v1.Array | grep -c 'FailDisk\|ReplaceDisk\|ScrubDiskGroup' | grep -qx 3"
check "grpcurl GetDiskGroup: g1 OPTIMAL with hdd-10 as member 2" bash -c \
  "grpcurl -plaintext -d '{\"name\":\"groups/g1\"}' $api strata.v1.Array/GetDiskGroup | tr -d ' \n' | grep -q '\"members\":\[\"disks/hdd-00\",\"disks/hdd-01\",\"disks/hdd-10\",\"disks/hdd-03\",\"disks/hdd-04\"\],\"state\":\"GROUP_OPTIMAL\"'"
check "grpcurl FailDisk of an unknown disk: NotFound" bash -c \
  "grpcurl -plaintext -d '{\"name\":\"disks/hdd-99\"}' $api strata.v1.Array/FailDisk 2>&1 | grep -q 'Code: NotFound'"

# A volume's extents moved between the tiers, as operations.
lun0="iscsi://127.0.0.1:$port/iqn.2026-11.io.strata:array/0"
stats() { s --json volume stats v1 | sed -n "s/.*\"$1\":\"\([0-9]*\)\".*/\1/p"; }
quiet s volume update v1 --affinity capacity
check "128 MiB written to v1 with capacity affinity" quiet qemu-io -f raw -c 'write -P 0x77 0 128M' "$lun0"
check "... lands on HDD" test "$(stats capacity_bytes)" = $((128 << 20))
move=$(s --json volume move v1 --to performance | sed -n 's/.*"name":"\(operations\/op-[0-9]*\)".*/\1/p')
check "strata volume move v1 --to performance: an operation ($move)" test -n "$move"
quiet s op cancel "$move"
check "cancelled at once: CANCELLED" test "$(until_op_ends "$move" 30)" = CANCELLED
check "... and v1's affinity is CAPACITY again" bash -c "'$cli' --api $api volume show v1 | grep -q ' CAPACITY '"
check "strata volume move v1 --to performance --wait: SUCCEEDED" bash -c "'$cli' --api $api volume move v1 --to performance --wait | grep -q SUCCEEDED"
check "... every extent of v1 is on SSD" test "$(stats performance_bytes):$(stats capacity_bytes)" = "$((128 << 20)):0"
check "strata volume move v1 --to capacity --wait (a drain): SUCCEEDED" bash -c "'$cli' --api $api volume move v1 --to capacity --wait | grep -q SUCCEEDED"
check "... every extent of v1 is on HDD" test "$(stats performance_bytes):$(stats capacity_bytes)" = "0:$((128 << 20))"
v1_reads() {
  local reads=()
  for mib in $(seq 0 4 124); do reads+=(-c "read -P 0x77 ${mib}M 1M" -c "read -P 0x77 $((mib * 1024 + 1984))k 64k"); done
  qemu-io -f raw "${reads[@]}" "$lun0" >/dev/null
}
check "v1's data moved intact, both ways" v1_reads
check "refused (grpcurl): a move to AUTO, naming the field" bash -c \
  "grpcurl -plaintext -d '{\"name\":\"pools/p1/volumes/v1\",\"affinity\":\"AUTO\"}' $api strata.v1.Array/MoveVolume 2>&1 | grep -q 'Code: InvalidArgument' &&
   grpcurl -plaintext -d '{\"name\":\"pools/p1/volumes/v1\",\"affinity\":\"AUTO\"}' $api strata.v1.Array/MoveVolume 2>&1 | grep -q 'Message: affinity: CAPACITY'"

# A new group from blank disks, and the pool grown by it.
for d in 11 12 13 14; do quiet s disk add hdd-$d --kind hdd --size 1G; done
quiet s disk add ssd-05 --kind ssd --size 1G
capacity() { s --json pool stats p1 | sed -n 's/.*"capacity_bytes":"\([0-9]*\)".*/\1/p'; }
before=$(capacity)
check "refused: a group with a member of another" refused "FAILED_PRECONDITION: group.members: disks/hdd-10 is a member of groups/g1" \
  group create g7 --raid6 hdd-10 hdd-11 hdd-12 hdd-13
check "refused: HDDs in a RAID-1 group" refused "INVALID_ARGUMENT: group.members: disks/hdd-11 is an HDD" group create g7 --raid1 hdd-11 hdd-12
check "refused: a read cache added to a running pool" refused "FAILED_PRECONDITION: pool: a read cache joins a pool only when the pool is built" \
  group create g6 --read-cache ssd-05 --pool p1
check "strata group create g7 --raid6 (4 new disks) --pool p1: OPTIMAL" bash -c \
  "'$cli' --api $api group create g7 --raid6 hdd-11 hdd-12 hdd-13 hdd-14 --pool p1 | grep -q '^groups/g7 *RAID6 *OPTIMAL *2.0 GiB'"
after=$(capacity)
check "the pool's capacity tier grew by g7's 2 GiB, less its reserved areas ($before -> $after)" \
  test $((after - before)) -ge $((1900 << 20)) -a $((after - before)) -le $((2048 << 20))
check "pools/p1 names g7 last" bash -c "'$cli' --api $api pool show p1 | grep -q 'groups/g1,groups/g2,groups/g3,groups/g7'"
check "hdd-11 is ONLINE as g7's member 0" bash -c "'$cli' --api $api disk show hdd-11 | grep -q 'ONLINE *groups/g7#0'"

# A second pool, over a group no pool has; a volume in it, served.
for d in 15 16 17 18; do quiet s disk add hdd-$d --kind hdd --size 1G; done
check "strata group create g6 (no pool): a group no pool uses" quiet s group create g6 --raid6 hdd-15 hdd-16 hdd-17 hdd-18
check "strata pool create p2 g6" bash -c "'$cli' --api $api pool create p2 g6 | grep -q '^pools/p2 *groups/g6 *-'"
check "refused: a pool over a group another pool has" refused "FAILED_PRECONDITION: pool.groups: groups/g6 is in pools/p2" pool create p3 g6
check "refused: a pool that exists" refused "ALREADY_EXISTS: pool_id: pools/p2 exists" pool create p2 g6
check "strata volume create w --pool p2, mapped as LUN 2" bash -c "'$cli' --api $api volume create w --pool p2 --size 1G >/dev/null && '$cli' --api $api map pools/p2/volumes/w --lun 2 >/dev/null"
lun2="iscsi://127.0.0.1:$port/iqn.2026-11.io.strata:array/2"
check "a pattern written to p2's volume reads back" quiet qemu-io -f raw -c 'write -P 0x2b 0 8M' -c 'read -P 0x2b 0 1M' -c 'read -P 0x2b 8128k 64k' "$lun2"
check "it lies on g6, p2's group" bash -c "'$cli' --api $api heat list pools/p2/volumes/w | grep -q 'CAPACITY *groups/g6'"
check "strata pool stats p2: 8 MiB used of its capacity tier" bash -c "'$cli' --api $api pool stats p2 | grep -q '^pools/p2 .* 8.0 MiB / '"

# kill -9 in the middle of a long write (past the pattern's blocks), so
# that regions are marked in the write-intent bitmap: the next start
# resyncs them. A SIGTERM soon after pauses that resync, promptly.
qemu-io -f raw -c 'write -P 0x77 600M 256M' "$url" >/dev/null 2>&1 &
writer=$!
sleep 1.5
kill -9 "$pid"; wait "$pid" 2>/dev/null
kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null  # qemu-io would retry the connection forever
pid=
start resync
began=$(date +%s%N)
kill -TERM "$pid"; wait "$pid"
status=$?
took_ms=$((($(date +%s%N) - began) / 1000000))
check "SIGTERM right after an unclean stop's restart: exit 0" test $status -eq 0
check "... within 5 s (took $took_ms ms)" test $took_ms -lt 5000
check "... the log says the resync paused, to resume at the next start" \
  grep -q "resync paused by the stop" "$state/resync.out" "$state/resync.err"
pid=
# The same disks, groups and data come back.
start third
check "after kill -9: hdd-10 is still g1's member 2, hdd-02 still a SPARE, g1 OPTIMAL" bash -c \
  "'$cli' --api $api disk show hdd-10 | grep -q 'ONLINE *groups/g1#2' && [[ \$('$cli' --api $api disk show hdd-02 | awk 'NR == 2 { print \$6 }') == SPARE ]] && [[ \$('$cli' --api $api group show g1 | awk 'NR == 2 { print \$3 }') == OPTIMAL ]]"
check "after kill -9: the pattern reads back" pattern_reads
check "after kill -9: g7 is assembled" test "$(group_state g7)" = OPTIMAL
check "after kill -9: the pool still has g7's capacity" test "$(capacity)" = "$after"
check "after kill -9: p2 and its volume's data are back" quiet qemu-io -f raw -c 'read -P 0x2b 0 1M' -c 'read -P 0x2b 4M 64k' -c 'read -P 0x2b 7M 1M' "$lun2"
check "strata controller show: it owns p1 and p2" bash -c "'$cli' --api $api controller show | grep -q 'pools/p1,pools/p2'"
kill -TERM "$pid"; wait "$pid"
check "SIGTERM: exit 0" test $? -eq 0
pid=
exit $failed
