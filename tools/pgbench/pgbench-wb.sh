#!/usr/bin/env bash
# A real database on a Strata LUN: PostgreSQL's pgbench (TPC-B-like), the
# pool writing through against writing back, in the same run.
#
#   tools/pgbench/pgbench-wb.sh [--stratad PATH] [--cli PATH] [--scale N] [--clients N]
#                               [--seconds S] [--repeat N] [--oltp-seconds S]
# (--seconds 0: the OLTP part only; --oltp-seconds 0: pgbench only)
#
# stratad runs on its embedded default (the model drives: RAID-6 10+2 of
# 10K HDD models, the write log on a RAID-1 pair of SSD models), with v1
# pinned to the capacity tier: every write is a RAID-6 write, which is what
# the write cache is for (on the SSD tier, writes skip the log).
# This machine's kernel has no iSCSI or NBD initiator, so the LUN reaches
# the kernel through a userspace one: qemu-storage-daemon logs in over
# iSCSI (qemu's libiscsi driver) and exports the LUN as a file over FUSE;
# a loop device makes that file a block device again, and the
# kernel's own ext4 (journalled, as a database server mounts it) is made
# and mounted on it. PostgreSQL (Debian's) keeps its data directory
# there, with its defaults (fsync on, synchronous commit, fdatasync of the
# WAL). A commit's flush travels: ext4 -> loop -> the FUSE file -> qemu ->
# SYNCHRONIZE CACHE on the LUN.
# Each run alternates the modes (a CHECKPOINT, then the log drained,
# before each), and the table gives medians of --repeat runs: TPS,
# latency mean and p99 (from pgbench's per-transaction log), and the ratio.
# Then (unless --oltp-seconds 0) the OLTP mix of issue 18 on the same LUN,
# past the ext4, with the pool's read cache on: 8 KiB, 95% reads, 90 in
# flight, zipf:1.1 offsets over 2 GiB, through fio's NBD engine and
# qemu-storage-daemon's NBD export of the LUN: IOPS, read and write mean
# and p99, write-through against write-back, medians of --repeat; then
# fio's 4 KiB random writes at QD1 and QD32 and 1 MiB sequential writes at
# QD4 on the same region: IOPS, MB/s, p50 and p99.
set -uo pipefail
cd "$(dirname "$0")/../.."
stratad=build/release/controller/stratad
cli=build/release/tools/strata
scale=10
clients=8
seconds=60
repeat=3
oltp_seconds=30
while (($# > 0)); do
  case "$1" in
    --stratad) stratad=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --oltp-seconds) oltp_seconds=$2; shift 2 ;;
    *) echo "pgbench-wb: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "pgbench-wb: run as root (FUSE, a loop device, a mount; PostgreSQL runs as postgres)" >&2; exit 2; }
tools/install-deps.sh --pgbench >/dev/null || { echo "pgbench-wb: tools/install-deps.sh --pgbench failed" >&2; exit 1; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

state=$(mktemp -d /var/tmp/strata-pgbench.XXXXXX)
chmod 755 "$state"
mkdir -p "$state/mnt" "$state/sock" "$state/logs"
touch "$state/lun"
chown postgres "$state/sock" "$state/logs"
array_pid= qsd_pid= nbd_pid= loop=
cleanup() {
  [[ -f "$state/mnt/pg/data/postmaster.pid" ]] && su postgres -c "$pgbin/pg_ctl -D '$state/mnt/pg/data' -m immediate stop" >/dev/null 2>&1
  mountpoint -q "$state/mnt" && umount "$state/mnt"
  [[ -n "$loop" ]] && losetup -d "$loop"
  [[ -n "$nbd_pid" ]] && kill "$nbd_pid" 2>/dev/null && wait "$nbd_pid" 2>/dev/null
  [[ -n "$qsd_pid" ]] && kill "$qsd_pid" 2>/dev/null && wait "$qsd_pid" 2>/dev/null
  mountpoint -q "$state/lun" && umount -l "$state/lun"
  [[ -n "$array_pid" ]] && kill "$array_pid" 2>/dev/null && wait "$array_pid" 2>/dev/null
  rm -rf "$state"
}
trap cleanup EXIT
die() { echo "pgbench-wb: $*" >&2; exit 1; }

port=$((30000 + RANDOM % 10000))
api=127.0.0.1:$((port + 2))
pgport=$((port + 3))
s() { "$cli" --api "$api" "$@"; }
stat_of() { s --json pool stats p1 | python3 -c "import json,sys; print(json.load(sys.stdin).get('$1', 0))"; }

"$stratad" --state-dir "$state/array" --iscsi "127.0.0.1:$port" --grpc "$api" >"$state/array.out" 2>"$state/array.err" &
array_pid=$!
until grep -q "stratad is ready" "$state/array.out" 2>/dev/null; do
  kill -0 "$array_pid" 2>/dev/null || { cat "$state/array.err" >&2; die "stratad died"; }
  sleep 0.1
done
s volume update v1 --affinity capacity >/dev/null || die "could not pin v1 to the capacity tier"

qemu-storage-daemon \
  --blockdev "driver=iscsi,node-name=lun,transport=tcp,portal=127.0.0.1:$port,target=iqn.2026-11.io.strata:array,lun=0,initiator-name=iqn.2026-11.io.strata:pgbench" \
  --export "type=fuse,id=lun,node-name=lun,mountpoint=$state/lun,writable=on" >"$state/qsd.out" 2>&1 &
qsd_pid=$!
lun_bytes() { stat -c %s "$state/lun" 2>/dev/null || echo 0; }
for _ in $(seq 100); do (($(lun_bytes) > 0)) && break; kill -0 "$qsd_pid" 2>/dev/null || break; sleep 0.1; done
(($(lun_bytes) > 0)) || { cat "$state/qsd.out" >&2; die "qemu-storage-daemon did not export the LUN"; }

# drained: the pool writes through until its log is empty
drained() {
  s pool update p1 --write-cache write-through >/dev/null || die "pool update failed"
  for _ in $(seq 600); do (($(stat_of dirty_bytes) == 0)) && return; sleep 0.2; done
  die "the write log did not drain in 120 s"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# alternate FUNCTION LEGEND: FUNCTION write-through N, then FUNCTION
# write-back N, for each repeat N; each prints one line of figures, kept
# in results[MODE] and shown with LEGEND
declare -A results
alternate() {
  results=()
  local r mode line
  for r in $(seq "$repeat"); do
    for mode in write-through write-back; do
      line=$("$1" "$mode" "$r") || exit 1
      results[$mode]+="$line"$'\n'
      echo "run $r, $mode: $line ($2)"
    done
  done
}
# figure MODE K: the median of the K-th figure of MODE's runs
figure() { awk -v f="$2" 'NF { print $f }' <<<"${results[$1]}" | median; }

if ((seconds > 0)); then
  loop=$(losetup --find --show --sizelimit $((8 << 30)) "$state/lun") || die "losetup failed (no loop devices?)"
  mkfs.ext4 -q -F -E nodiscard "$loop" || die "mkfs.ext4 failed"
  mount -o noatime "$loop" "$state/mnt" || die "mounting the ext4 failed"
  mkdir "$state/mnt/pg" && chown postgres:postgres "$state/mnt/pg"
  as_postgres() { su postgres -c "$*"; }
  as_postgres "$pgbin/initdb -D '$state/mnt/pg/data' -N -A trust" >"$state/initdb.out" 2>&1 || { cat "$state/initdb.out" >&2; die "initdb failed"; }
  as_postgres "$pgbin/pg_ctl -D '$state/mnt/pg/data' -l '$state/logs/postgres.log' -w \
    -o \"-p $pgport -k $state/sock -c listen_addresses=''\" start" >/dev/null || { cat "$state/logs/postgres.log" >&2; die "PostgreSQL did not start"; }
  pg() { "$pgbin/$1" -h "$state/sock" -p "$pgport" -U postgres "${@:2}"; }
  echo "loading pgbench at scale $scale (about $((scale * 16)) MB) through ext4, a loop device, FUSE and iSCSI..."
  t0=$(date +%s)
  pg pgbench -i -q -s "$scale" postgres >"$state/init.out" 2>&1 || { cat "$state/init.out" >&2; die "pgbench -i failed"; }
  echo "loaded in $(($(date +%s) - t0)) s; database $(pg psql -Atc "select pg_size_pretty(pg_database_size('postgres'))" postgres)"

  # run MODE N: one pgbench run; prints "tps mean_ms p99_ms"
  run() {
    # The checkpoint writes what the last run left in shared buffers: while
    # writing back, so that it takes seconds, not minutes.
    s pool update p1 --write-cache write-back >/dev/null || die "pool update failed"
    pg psql -qc checkpoint postgres || die "CHECKPOINT failed"
    drained
    s pool update p1 --write-cache "$1" >/dev/null || die "pool update failed"
    rm -f "$state/logs"/run.*
    pg pgbench -c "$clients" -j 2 -T "$seconds" -l --log-prefix="$state/logs/run" postgres >"$state/logs/$1.$2.out" 2>&1 ||
      { cat "$state/logs/$1.$2.out" >&2; die "pgbench failed"; }
    local tps
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$state/logs/$1.$2.out")
    # the per-transaction log: client, transaction, latency (µs), ...
    cat "$state/logs"/run.* | awk '{ print $3 }' | sort -n | awk -v tps="$tps" \
      '{ v[NR] = $1; sum += $1 } END { printf "%s %.2f %.2f\n", tps, sum / NR / 1000, v[int(NR * 0.99 + 0.5)] / 1000 }'
  }

  alternate run "TPS, mean ms, p99 ms"
  printf '\npgbench TPC-B-like, scale %s, %s clients, %s s, median of %s; v1 on RAID-6 10+2 (10K HDD models)\n' \
    "$scale" "$clients" "$seconds" "$repeat"
  printf '%-14s %10s %14s %12s\n' "write cache" "TPS" "latency ms" "p99 ms"
  for mode in write-through write-back; do
    printf '%-14s %10.1f %14.2f %12.2f\n' "$mode" "$(figure "$mode" 1)" "$(figure "$mode" 2)" "$(figure "$mode" 3)"
  done
  printf 'write-back / write-through: %.2fx TPS\n' "$(echo "$(figure write-back 1) / $(figure write-through 1)" | bc -l)"
  echo "the pool's counters: $(stat_of writes_logged) writes logged, $(stat_of writes_through) written through," \
    "$(stat_of full_stripe_destages) full-stripe destages"
fi

# The OLTP mix with the read cache (the pool's g4), on the same LUN past
# the ext4: fio's NBD engine through a second qemu-storage-daemon's NBD
# export of it (a second iSCSI session).
((oltp_seconds > 0)) || exit 0
qemu-storage-daemon \
  --blockdev "driver=iscsi,node-name=lun,transport=tcp,portal=127.0.0.1:$port,target=iqn.2026-11.io.strata:array,lun=0,initiator-name=iqn.2026-11.io.strata:fio" \
  --nbd-server "addr.type=unix,addr.path=$state/nbd.sock" \
  --export "type=nbd,id=nbd,node-name=lun,name=lun,writable=on" >"$state/nbd.out" 2>&1 &
nbd_pid=$!
for _ in $(seq 100); do [[ -S "$state/nbd.sock" ]] && break; kill -0 "$nbd_pid" 2>/dev/null || break; sleep 0.1; done
[[ -S "$state/nbd.sock" ]] || { cat "$state/nbd.out" >&2; die "qemu-storage-daemon did not export the LUN over NBD"; }
fio_at() {  # NAME ARGS...: one fio job on the LUN's 16-18 GiB, JSON out
  fio --name="$1" --ioengine=nbd --uri="nbd+unix:///lun?socket=$state/nbd.sock" --offset=16g --size=2g \
    --output-format=json --output="$state/logs/$1.json" "${@:2}" >"$state/logs/$1.fio.out" 2>&1 ||
    { cat "$state/logs/$1.fio.out" >&2; return 1; }
}
echo
echo "writing the OLTP region (2 GiB at 16 GiB, 1 MiB sequential writes)..."
fio_at fill --rw=write --bs=1m --iodepth=8 || die "fio could not write the region"
# oltp MODE N: prints "iops read_mean read_p99 write_mean write_p99" (ms)
oltp() {
  drained
  s pool update p1 --write-cache "$1" >/dev/null || die "pool update failed"
  # 6 jobs x 15: qemu's NBD server takes at most 16 requests from one connection
  fio_at "oltp.$1.$2" --rw=randrw --rwmixread=95 --bs=8k --numjobs=6 --iodepth=15 --thread --group_reporting \
    --random_distribution=zipf:1.1 \
    --time_based --runtime="$oltp_seconds" || die "fio failed"
  python3 - "$state/logs/oltp.$1.$2.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
ms = lambda side, key: j[side]["clat_ns"][key] / 1e6 if key == "mean" else j[side]["clat_ns"]["percentile"]["99.000000"] / 1e6
print("%.0f %.2f %.2f %.2f %.2f" % (j["read"]["iops"] + j["write"]["iops"], ms("read", "mean"), ms("read", "p99"),
                                    ms("write", "mean"), ms("write", "p99")))
PY
}
alternate oltp "IOPS, read mean/p99 ms, write mean/p99 ms"
printf '\nOLTP: 8 KiB, 95%% reads, 90 in flight, zipf:1.1 over 2 GiB, %s s, median of %s; RAID-6 with the read cache\n' \
  "$oltp_seconds" "$repeat"
printf '%-14s %8s %12s %12s %12s %12s\n' "write cache" "IOPS" "read ms" "read p99" "write ms" "write p99"
for mode in write-through write-back; do
  printf '%-14s %8.0f %12.2f %12.2f %12.2f %12.2f\n' "$mode" "$(figure "$mode" 1)" "$(figure "$mode" 2)" "$(figure "$mode" 3)" \
    "$(figure "$mode" 4)" "$(figure "$mode" 5)"
done
printf 'write-back / write-through: %.2fx IOPS\n' "$(echo "$(figure write-back 1) / $(figure write-through 1)" | bc -l)"

# fio's writes on the same region: 4 KiB random at QD1 and QD32, 1 MiB
# sequential at QD4. A run longer than the log can absorb shows the
# sustained rate (back-pressure: the destage rate), not only the burst.
# writes MODE N: the current load ($load) once; prints "iops mbps p50_ms p99_ms"
writes() {
  drained
  s pool update p1 --write-cache "$1" >/dev/null || die "pool update failed"
  fio_at "writes.$1.$2" $load --time_based --runtime="$oltp_seconds" || die "fio failed"
  python3 - "$state/logs/writes.$1.$2.json" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]
p = w["clat_ns"]["percentile"]
print("%.0f %.1f %.2f %.2f" % (w["iops"], w["bw_bytes"] / 1e6, p["50.000000"] / 1e6, p["99.000000"] / 1e6))
PY
}
for load in "--rw=randwrite --bs=4k --iodepth=1" "--rw=randwrite --bs=4k --iodepth=32" "--rw=write --bs=1m --iodepth=4"; do
  echo
  echo "fio $load, $oltp_seconds s:"
  alternate writes "IOPS, MB/s, p50 ms, p99 ms"
  printf '%-14s %8s %8s %10s %10s\n' "write cache" "IOPS" "MB/s" "p50 ms" "p99 ms"
  for mode in write-through write-back; do
    printf '%-14s %8.0f %8.1f %10.2f %10.2f\n' "$mode" "$(figure "$mode" 1)" "$(figure "$mode" 2)" "$(figure "$mode" 3)" \
      "$(figure "$mode" 4)"
  done
  printf 'write-back / write-through: %.2fx IOPS\n' "$(echo "$(figure write-back 1) / $(figure write-through 1)" | bc -l)"
done
