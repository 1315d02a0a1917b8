#!/usr/bin/env bash
# The iSCSI target benchmark: Strata's target against tgtd, in one run.
#
#   tools/iscsibench/iscsi-bench.sh [--seconds S] [--repeat N] [--loops L] [--target-bin PATH]
#
# --loops runs Strata's target on L loops (default 1): its connections
# spread over them, the LUN on the first (tgtd runs its own threads).
# Both serve a 256 MiB memory-backed LUN (tgtd: a file on /dev/shm) on
# loopback. iscsi-perf (libiscsi) drives 4 KiB random reads at queue depth
# 1, 32 and 128 against each in turn, alternating, `--repeat` times. Each
# target's CPU time comes from /proc (user + system, all its threads) over
# the run. It prints median IOPS, CPU microseconds per I/O and IOPS per
# target-CPU-second, and Strata's ratios to tgtd. Then 64 KiB sequential
# reads (iscsi-perf, 8 in flight) and writes (qemu-img bench, 8 in flight,
# the whole LUN; skipped, saying so, without qemu-utils and
# qemu-block-extra), in MB/s. Needs root for tgtd.
set -euo pipefail
seconds=5
repeat=3
loops=1
here=$(cd "$(dirname "$0")/../.." && pwd)
target_bin=$here/build/release/tools/strata-iscsi-target
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --loops) loops=$2; shift 2 ;;
    --target-bin) target_bin=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S] [--repeat N] [--loops L] [--target-bin PATH]" >&2; exit 2 ;;
  esac
done
for tool in iscsi-perf tgtd tgtadm; do
  command -v "$tool" >/dev/null || { echo "iscsi-bench: $tool is missing (tools/install-deps.sh)" >&2; exit 1; }
done
work=$(mktemp -d /dev/shm/strata-iscsi-bench-XXXXXX)
strata_port=3270
tgt_port=3271
cleanup() {
  # tgtd may outlive SIGTERM while it tears sessions down: ask it to stop,
  # then make sure.
  tgtadm -C 42 --op delete --mode system --force >/dev/null 2>&1 || true
  kill "${strata_pid:-}" "${tgt_pid:-}" 2>/dev/null || true
  sleep 1
  kill -9 "${strata_pid:-}" "${tgt_pid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$target_bin" --listen 127.0.0.1:$strata_port --target iqn.2026-11.io.strata:bench --lun-mib 256 --loops "$loops" >"$work/strata.out" 2>&1 &
strata_pid=$!
tgtd -f --iscsi portal=127.0.0.1:$tgt_port --control-port 42 >"$work/tgtd.out" 2>&1 &
tgt_pid=$!
sleep 1
truncate -s 256M "$work/tgt.img"
tgtadm -C 42 --lld iscsi --op new --mode target --tid 1 -T iqn.2026-11.peer:tgt
tgtadm -C 42 --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$work/tgt.img"
tgtadm -C 42 --lld iscsi --op bind --mode target --tid 1 -I ALL
declare -A url=([strata]=iscsi://127.0.0.1:$strata_port/iqn.2026-11.io.strata:bench/0
                [tgt]=iscsi://127.0.0.1:$tgt_port/iqn.2026-11.peer:tgt/1)
declare -A pid=([strata]=$strata_pid [tgt]=$tgt_pid)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick_hz=$(getconf CLK_TCK)

run() {  # run NAME QD -> "iops cpu_us_per_io"
  local name=$1 qd=$2 before after iops
  before=$(cpu_ticks "${pid[$name]}")
  iops=$(timeout $((seconds + 20)) iscsi-perf -m "$qd" -b 8 -r -t "$seconds" "${url[$name]}" 2>&1 |
         tr '\r' '\n' | sed -n 's/^iops average \([0-9]*\).*/\1/p' | tail -1)
  after=$(cpu_ticks "${pid[$name]}")
  awk -v i="${iops:-0}" -v t=$((after - before)) -v hz="$tick_hz" -v s="$seconds" \
      'BEGIN { n = i * s; printf "%d %.1f\n", i, (n > 0 ? t / hz * 1e6 / n : 0) }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

printf "%-8s %4s %10s %12s %16s\n" target QD IOPS "CPU us/IO" "IOPS/CPU-s"
for qd in 1 32 128; do
  declare -A iops_list=() cpu_list=()
  for ((r = 0; r < repeat; ++r)); do
    for name in strata tgt; do
      read -r i c < <(run "$name" "$qd")
      iops_list[$name]+="$i "
      cpu_list[$name]+="$c "
    done
  done
  declare -A med_iops=() med_cpu=()
  for name in strata tgt; do
    med_iops[$name]=$(tr ' ' '\n' <<<"${iops_list[$name]}" | grep . | median)
    med_cpu[$name]=$(tr ' ' '\n' <<<"${cpu_list[$name]}" | grep . | median)
    printf "%-8s %4d %10s %12s %16.0f\n" "$name" "$qd" "${med_iops[$name]}" "${med_cpu[$name]}" \
      "$(awk -v c="${med_cpu[$name]}" 'BEGIN { print (c > 0 ? 1e6 / c : 0) }')"
  done
  awk -v si="${med_iops[strata]}" -v ti="${med_iops[tgt]}" -v sc="${med_cpu[strata]}" -v tc="${med_cpu[tgt]}" -v qd="$qd" \
    'BEGIN { printf "  QD %d: Strata/tgt IOPS %.2fx, IOPS per CPU-second %.2fx (goal >= 2x)\n", qd, (ti > 0 ? si / ti : 0), (sc > 0 ? tc / sc : 0) }'
done

# 64 KiB sequential: MB/s (10^6 bytes per second), medians of `repeat` runs.
seq_read() {  # seq_read NAME -> MB/s
  local iops
  iops=$(timeout $((seconds + 20)) iscsi-perf -m 8 -b 128 -t "$seconds" "${url[$1]}" 2>&1 |
         tr '\r' '\n' | sed -n 's/^iops average \([0-9]*\).*/\1/p' | tail -1)
  awk -v i="${iops:-0}" 'BEGIN { printf "%.0f\n", i * 65536 / 1e6 }'
}
seq_write() {  # seq_write NAME -> MB/s: the whole 256 MiB LUN
  local secs
  secs=$(timeout 300 qemu-img bench -f raw -t none -w -s 65536 -c 4096 -d 8 "${url[$1]}" 2>&1 |
         sed -n 's/^Run completed in \([0-9.]*\) seconds.*/\1/p')
  awk -v s="${secs:-0}" 'BEGIN { printf "%.0f\n", (s > 0 ? 4096 * 65536 / 1e6 / s : 0) }'
}
kinds=(read)
if command -v qemu-img >/dev/null && qemu-img --help 2>/dev/null | grep -q iscsi; then
  kinds+=(write)
else
  echo "(64 KiB sequential writes skipped: qemu-img with iSCSI support is missing; tools/install-deps.sh installs qemu-utils and qemu-block-extra)"
fi
printf "%-8s %-22s %8s\n" target "64 KiB sequential" "MB/s"
for kind in "${kinds[@]}"; do
  declare -A mbs_list=()
  for ((r = 0; r < repeat; ++r)); do
    for name in strata tgt; do mbs_list[$name]+="$(seq_$kind "$name") "; done
  done
  declare -A med_mbs=()
  for name in strata tgt; do
    med_mbs[$name]=$(tr ' ' '\n' <<<"${mbs_list[$name]}" | grep . | median)
    printf "%-8s %-22s %8s\n" "$name" "$kind" "${med_mbs[$name]}"
  done
  awk -v s="${med_mbs[strata]}" -v t="${med_mbs[tgt]}" -v k="$kind" \
    'BEGIN { printf "  64 KiB sequential %s: Strata/tgt %.2fx\n", k, (t > 0 ? s / t : 0) }'
done
