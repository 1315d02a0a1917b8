#!/usr/bin/env bash
# The write-back cache in stratad, with real processes: the embedded
# default's layout on small drives (--small-shelf: its pool has a mirrored
# write log), the drives' write caches held in stratad's memory
# (--volatile-drive-caches: a kill -9 loses what they had not flushed, as
# a power cut would). Small writes through qemu-io's iSCSI driver are
# acknowledged from the log; stratad is killed -9 before they are
# destaged, and the restart replays the log: every write reads back. A
# failed write-log SSD turns the cache to write-through, with an event,
# and nothing is lost; once the SSD is rebuilt, write-back resumes. A
# volume set to write-through skips the log while its pool writes back.
#   stratad_write_cache_test.sh PATH/TO/stratad PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
command -v qemu-io >/dev/null || { echo "SKIP: qemu-io is missing (tools/install-deps.sh installs qemu-utils)"; exit 77; }
dir=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 12000))
api=127.0.0.1:$((port + 2))
target=iqn.2026-11.io.strata:array
s() { "$cli" --api "$api" "$@"; }
# A field of the pool's statistics (the JSON of strata.v1.PoolStatistics).
stat_of() { s --json pool stats p1 | python3 -c "import json,sys; print(json.load(sys.stdin).get('$1', 0))"; }

start() {
  "$stratad" --state-dir "$dir/state" --small-shelf --volatile-drive-caches --iscsi "127.0.0.1:$port" \
    --grpc "$api" >"$dir/$1.out" 2>"$dir/$1.err" &
  pid=$!
  wait_ready "$dir/$1.out" "$dir/$1.err"
}
lun="driver=raw,file.driver=iscsi,file.transport=tcp,file.portal=127.0.0.1:$port,file.target=$target,file.lun=0,file.initiator-name=iqn.2026-11.test:host"

start first
quiet s volume update v1 --affinity capacity
check "the pool writes back, on its write log" test "$(stat_of write_cache)" = write-back
# The first write to each extent (a whole 4 MiB extent) goes past the log;
# the small ones after it are logged.
commands=()
for i in $(seq 0 199); do commands+=(-c "write -P $((i % 200 + 1)) $((i * 40))k 8k"); done
qemu-io --image-opts "$lun" "${commands[@]}" >"$dir/writes.out" 2>&1
check "200 writes acknowledged" test "$(grep -c '^wrote 8192/8192 bytes' "$dir/writes.out")" -eq 200
logged=$(stat_of writes_logged)
echo "writes logged: $logged; dirty bytes: $(stat_of dirty_bytes)"
check "most of them were logged" test "$logged" -ge 150
kill -9 "$pid"; wait "$pid" 2>/dev/null
pid=

start second
check "the restart replayed the write log" bash -c "'$cli' --api $api events | grep -q 'replayed [0-9]* records of its write log'"
reads=()
for i in $(seq 0 199); do reads+=(-c "read -P $((i % 200 + 1)) $((i * 40))k 8k"); done
qemu-io --image-opts "$lun" "${reads[@]}" >"$dir/reads.out" 2>&1
check "every acknowledged write reads back after the kill -9" test "$(grep -c '^read 8192/8192 bytes' "$dir/reads.out")" -eq 200
check "... and no read found other data" bash -c "! grep -q 'Pattern verification failed' '$dir/reads.out'"

# One SSD of the write log fails: write-through, with an event; nothing lost.
quiet s disk fail ssd-03
qemu-io --image-opts "$lun" -c "write -P 0x33 16k 8k" >/dev/null 2>&1
for _ in $(seq 50); do [[ $(stat_of write_cache) == write-through ]] && break; sleep 0.2; done
check "a failed log SSD: the pool writes through" test "$(stat_of write_cache)" = write-through
check "... and says why" bash -c "'$cli' --api $api --json pool stats p1 | grep -q 'lost its redundancy'"
check "... with an event" bash -c "'$cli' --api $api events | grep -q 'write cache: the write log.s group lost its redundancy'"
check "writes go on, and read back" bash -c \
  "qemu-io --image-opts '$lun' -c 'write -P 0x44 24k 8k' -c 'read -P 0x44 24k 8k' | grep -q '^read 8192/8192 bytes'"
check "the older writes still read back" bash -c \
  "qemu-io --image-opts '$lun' -c 'read -P 0x33 16k 8k' -c 'read -P 3 80k 8k' | grep -c '^read 8192/8192 bytes' | grep -q 2"
quiet s disk replace ssd-03 --with ssd-03
for _ in $(seq 150); do [[ $(stat_of write_cache) == write-back ]] && break; sleep 0.2; done
check "rebuilt: write-back resumes" test "$(stat_of write_cache)" = write-back

# An administrator turns write-back off: the dirty data is destaged first,
# and the events say so; then on again.
qemu-io --image-opts "$lun" -c "write -P 0x55 32k 8k" >/dev/null 2>&1
check "pool update --write-cache write-through is taken" quiet s pool update p1 --write-cache write-through
check "... the pool record says so" bash -c "'$cli' --api $api pool show p1 | grep -q 'write-through'"
check "... the statistics say why" bash -c "'$cli' --api $api --json pool stats p1 | grep -q 'an administrator asked for write-through'"
for _ in $(seq 100); do s events | grep -q 'write cache drained' && break; sleep 0.2; done
check "... an event says the log drained" bash -c "'$cli' --api $api events | grep -q 'write cache drained: writing through'"
check "... no dirty data is left" test "$(stat_of dirty_bytes)" = 0
check "... and the write reads back" bash -c "qemu-io --image-opts '$lun' -c 'read -P 0x55 32k 8k' | grep -q '^read 8192/8192 bytes'"
check "pool update --write-cache write-back" quiet s pool update p1 --write-cache write-back
check "... write-back again" test "$(stat_of write_cache)" = write-back
check "a bad mode is refused, saying why" bash -c "! '$cli' --api $api pool update p1 --write-cache sometimes 2>&1 | grep -q '^NAME'"

# One volume writes through while its pool writes back: its writes skip
# the log (unless the log holds their blocks), and the mode outlives a
# restart. Its statistics say what its writes get and what it has dirty.
vstat_of() { s --json volume stats v1 | python3 -c "import json,sys; print(json.load(sys.stdin).get('$1', 0))"; }
qemu-io --image-opts "$lun" -c "write -P 0x66 40k 8k" >/dev/null 2>&1
check "a logged write shows in the volume's dirty bytes" test "$(vstat_of dirty_bytes)" -gt 0
check "volume update --write-cache write-through is taken" quiet s volume update v1 --write-cache write-through
check "... the volume record says so" bash -c "'$cli' --api $api volume show v1 | grep -q ' write-through '"
check "... an event says what it had dirty" bash -c "'$cli' --api $api events | grep -q 'v1.*write cache: writing through; its [0-9]* dirty bytes'"
check "... its statistics say write-through" test "$(vstat_of write_cache)" = write-through
check "... while the pool still writes back" test "$(stat_of write_cache)" = write-back
logged=$(stat_of writes_logged)
through=$(stat_of writes_through)
commands=()
# In extent 0, written before (an extent's first write goes past the log
# anyway), clear of 0x66's blocks, which are still dirty.
for i in $(seq 1 20); do commands+=(-c "write -P 0x77 $((i * 40 + 20))k 8k"); done
qemu-io --image-opts "$lun" "${commands[@]}" >/dev/null 2>&1
check "its writes skip the log" test "$(stat_of writes_logged)" -eq "$logged"
check "... and go to the groups" test "$(stat_of writes_through)" -ge $((through + 20))
check "... and read back" bash -c "qemu-io --image-opts '$lun' -c 'read -P 0x77 60k 8k' -c 'read -P 0x66 40k 8k' | grep -c '^read 8192/8192 bytes' | grep -q 2"
for _ in $(seq 100); do [[ $(vstat_of dirty_bytes) == 0 ]] && break; sleep 0.2; done
check "what it had dirty is destaged" test "$(vstat_of dirty_bytes)" = 0
check "a bad volume mode is refused" bash -c "! '$cli' --api $api volume update v1 --write-cache never >/dev/null 2>&1"
kill -TERM "$pid"; wait "$pid"
pid=
start third
check "the volume's mode outlives a restart" test "$(vstat_of write_cache)" = write-through
logged=$(stat_of writes_logged)
qemu-io --image-opts "$lun" -c "write -P 0x78 860k 8k" >/dev/null 2>&1
check "... its writes still skip the log" test "$(stat_of writes_logged)" -eq "$logged"
check "volume update --write-cache write-back" quiet s volume update v1 --write-cache write-back
qemu-io --image-opts "$lun" -c "write -P 0x79 900k 8k" >/dev/null 2>&1
check "... its writes are logged again" test "$(stat_of writes_logged)" -gt "$logged"
check "... and read back" bash -c "qemu-io --image-opts '$lun' -c 'read -P 0x79 900k 8k' -c 'read -P 0x78 860k 8k' | grep -c '^read 8192/8192 bytes' | grep -q 2"

kill -TERM "$pid"; wait "$pid"
check "SIGTERM: exit 0" test $? -eq 0
pid=
if [[ $failed -ne 0 ]]; then
  echo "--- first start ---"; tail -20 "$dir/first.err"
  echo "--- second start ---"; tail -20 "$dir/second.err"
  echo "--- third start ---"; tail -20 "$dir/third.err" 2>/dev/null
  exit 1
fi
echo "PASS"
