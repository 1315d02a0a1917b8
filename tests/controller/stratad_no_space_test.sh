#!/usr/bin/env bash
# A full backing filesystem (ENOSPC) under stratad, with real processes: a
# RAID-6 group of file-backed drives whose files are sparse on a 40 MiB
# tmpfs, with the state directory (the RocksDB stores, the SSDs' files) on
# it too, written through qemu-io's iSCSI driver until the tmpfs is full.
# The write that finds no space fails with SPACE ALLOCATION FAILED WRITE
# PROTECT; no disk is failed and the group stays optimal; the pool stops
# taking writes with a critical event; every write acknowledged before
# reads back. SIGTERM on the full filesystem stops stratad cleanly (exit 0;
# it aborted once, on RocksDB 7.8's assertion in its info log:
# tiering/rocksdb_log.h): the pool's metadata store cannot flush, and the
# log says it closed in its background-error state. Every acknowledged
# write reads back after a restart with room again, which assembles the
# group and resyncs the stripes the refused writes tore; writes succeed.
#   stratad_no_space_test.sh PATH/TO/stratad PATH/TO/strata
# The tmpfs is mounted in a user and mount namespace of its own (unshare
# -rm), so the test needs no privileges and leaves no mount behind.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
for tool in qemu-io unshare; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (tools/install-deps.sh installs qemu-utils, util-linux)"; exit 77; }
done
if [[ -z "${STRATA_NO_SPACE_NS:-}" ]]; then
  if ! unshare -rm true 2>/dev/null; then
    echo "SKIP: this kernel does not let an unprivileged user mount a tmpfs in a namespace (unshare -rm)"
    exit 77
  fi
  exec unshare -rm env STRATA_NO_SPACE_NS=1 "$0" "$@"
fi
dir=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; umount "$dir/full" 2>/dev/null; rm -rf "$dir"' EXIT
mkdir "$dir/full"
mount -t tmpfs -o size=40m strata-full "$dir/full" || { echo "FAIL: cannot mount a tmpfs in the namespace"; exit 1; }
port=$((20000 + RANDOM % 12000))  # below Linux's ephemeral ports (32768 and up), which outgoing connections take
api=127.0.0.1:$((port + 2))
target=iqn.2026-11.test:full
initiator=iqn.2026-11.test:db1
s() { "$cli" --api "$api" "$@"; }
drives=""
for i in 0 1 2 3 4 5; do
  truncate -s 256M "$dir/full/hdd-0$i.img"  # sparse: the tmpfs fills as they are written
  drives+="[[drive]]
name = \"hdd-0$i\"
kind = \"hdd\"
path = \"full/hdd-0$i.img\"
"
done

cat >"$dir/strata.toml" <<EOF
[daemon]
state_dir = "full/array"
iscsi_listen = "127.0.0.1:$port"
target_name = "$target"
grpc_listen = "$api"

$drives
[[drive]]
name = "ssd-00"
kind = "ssd"
size = "256M"
[[drive]]
name = "ssd-01"
kind = "ssd"
size = "256M"

[[group]]
name = "g1"
kind = "raid6"
drives = ["hdd-00", "hdd-01", "hdd-02", "hdd-03", "hdd-04", "hdd-05"]
[[group]]
name = "g2"
kind = "raid1"
drives = ["ssd-00", "ssd-01"]

[pool]
groups = ["g1", "g2"]

[[volume]]
name = "db"
size = "512M"
placement = "capacity"

[[host]]
name = "db1"
iqns = ["$initiator"]

[[mapping]]
volume = "db"
host = "db1"
lun = 0
EOF

start() {
  "$stratad" --config "$dir/strata.toml" >"$dir/$1.out" 2>"$dir/$1.err" &
  pid=$!
  wait_ready "$dir/$1.out" "$dir/$1.err"
}
lun="driver=raw,file.driver=iscsi,file.transport=tcp,file.portal=127.0.0.1:$port,file.target=$target,file.lun=0,file.initiator-name=$initiator"

start first
# 1 MiB writes, one at a time, until the filesystem is full (each new
# 4 MiB extent takes 6 MiB of it with parity): 40 of them cannot all fit.
commands=()
for i in $(seq 0 39); do commands+=(-c "write -P 0x5a ${i}M 1M"); done
qemu-io --image-opts "$lun" "${commands[@]}" >"$dir/writes.out" 2>&1
written=$(grep -c '^wrote 1048576/1048576 bytes' "$dir/writes.out")
echo "acknowledged: $written MiB of 40"
check "some writes were acknowledged, and then one failed" bash -c "(( $written > 0 && $written < 40 ))"
check "... with an error (SPACE ALLOCATION FAILED WRITE PROTECT), not a hang or a crash" \
  grep -qi 'error\|failed' "$dir/writes.out"
check "no disk is failed" bash -c "'$cli' --api $api disk list | grep -q hdd-05 && ! '$cli' --api $api disk list | grep -qi failed"
check "the group is optimal" bash -c "'$cli' --api $api group list | grep -q '^groups/g1 *RAID6 *OPTIMAL'"
check "a critical event says the pool's writes stopped, and why" bash -c \
  "'$cli' --api $api events | grep -q 'CRITICAL.*pools/p1.*writes stopped: .*full'"
check "the pool's statistics say so" bash -c "'$cli' --api $api pool stats p1 | grep -q 'STOPPED'"
check "writes are refused at once while stopped" bash -c \
  "! qemu-io --image-opts '$lun' -c 'write -P 0x11 0 4k' 2>&1 | grep -q '^wrote'"
check "every acknowledged write reads back" \
  qemu-io --image-opts "$lun" -c "read -P 0x5a 0 ${written}M"
# The stop on the full filesystem. Whatever room it has left (none, as a
# rule: the refused write found none) goes to a file of its own first, so
# that the pool's metadata store cannot flush at the stop.
dd if=/dev/zero of="$dir/full/slack" bs=4k 2>/dev/null
echo "free on the tmpfs at the stop: $(df --output=avail -k "$dir/full" | tail -1 | tr -d ' ') KiB"
kill -TERM "$pid"; wait "$pid"
status=$?
pid=
check "SIGTERM on the full filesystem: exit 0 (not 134, an abort), status $status" test "$status" -eq 0
check "... and the log says the metadata store closed in its background-error state, and why" \
  grep -q 'pools/p1: the metadata store is in its background-error state (.*[Nn]o space left.*): closed without its last flush' "$dir/first.err"
check "... and that it stopped cleanly" grep -q 'stopped cleanly' "$dir/first.err"
grep -h 'background-error state' "$dir/first.err" | head -2

# Room again, and a restart: the group assembles whole, its torn stripes
# are resynced, and writes go on.
rm -f "$dir/full/slack"
mount -o remount,size=1g "$dir/full"
start second
check "the restart assembles g1 with every member" bash -c "'$cli' --api $api group list | grep -q '^groups/g1 *RAID6 *OPTIMAL'"
check "every acknowledged write still reads back (the extent map, replayed from the log)" \
  qemu-io --image-opts "$lun" -c "read -P 0x5a 0 ${written}M"
check "writes succeed again" bash -c \
  "qemu-io --image-opts '$lun' -c 'write -P 0x77 100M 2M' -c 'read -P 0x77 100M 2M' | grep -q '^read 2097152/2097152 bytes'"
for _ in $(seq 100); do
  grep -q "resync.*g1\|g1.*resync" "$dir/second.err" && break
  sleep 0.1
done
check "the torn stripes were resynced" grep -qi "g1.*resync\|resync.*g1" "$dir/second.err"
grep -i "resync" "$dir/second.err" | head -3
kill -TERM "$pid"; wait "$pid"
pid=
if [[ $failed -ne 0 ]]; then
  echo "--- qemu-io's writes"; tail -5 "$dir/writes.out"
  echo "--- stratad"; grep -ih "space\|resync\|g1\|metadata\|assert\|stopped" "$dir"/*.err | head -20
fi
exit $failed
