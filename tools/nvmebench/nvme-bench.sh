#!/usr/bin/env bash
# The NVMe/TCP benchmark: Strata's NVMe/TCP target against Strata's iSCSI
# target, in one run, on one memory-backed LUN served by both
# (strata-iscsi-target --nvme-listen: unit 0 is LUN 0 and namespace 1).
#
#   tools/nvmebench/nvme-bench.sh [--seconds S] [--repeat N] [--nvmet]
#
# 4 KiB random reads, then writes, at queue depth 1 and 32 on one
# connection: strata-nvme-perf over NVMe/TCP, iscsi-perf (libiscsi) over
# iSCSI (reads; writes over iSCSI are not in iscsi-perf: NVMe/TCP alone),
# alternating, `--repeat` times. The target's CPU time comes from /proc
# (user + system, all threads) over each run. It prints median IOPS, CPU
# microseconds per I/O and IOPS per target-CPU-second, and NVMe/TCP's
# ratio to iSCSI (goal: at least 1.3x per CPU-second). Then each protocol
# with 1 loop against 2 (strata-iscsi-target --loops): NVMe/TCP with 2
# queues at QD 32, each queue its own connection, and iSCSI with 2
# sessions at QD 32 (two iscsi-perf, two initiator names), so that with 2
# loops each connection has a loop (goal: 2 loops at least 1.6x the IOPS
# of 1 where the host has a core to spare).
#
# --nvmet first proves strata-nvme-perf against the Linux kernel's target
# (nvmet-tcp, RAM-backed, in the Debian guest of /work/shared/guest,
# reached through a port forward): a --verify pass at 4 KiB and one at
# 64 KiB with digests (R2T and H2CData). The guest runs under emulation:
# its speed is not compared.
set -euo pipefail
seconds=5
repeat=3
nvmet=
here=$(cd "$(dirname "$0")/../.." && pwd)
guest_dir=${GUEST_DIR:-/work/shared/guest}
bin=$here/build/release/tools
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --nvmet) nvmet=1; shift ;;
    *) echo "usage: $0 [--seconds S] [--repeat N] [--nvmet]" >&2; exit 2 ;;
  esac
done
command -v iscsi-perf >/dev/null || { echo "nvme-bench: iscsi-perf is missing (tools/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d /dev/shm/strata-nvme-bench-XXXXXX)
cleanup() {
  [[ -n "${target_pid:-}" ]] && kill "$target_pid" 2>/dev/null
  [[ -n "${guest_pid:-}" ]] && { touch "$work/share/done"; wait "$guest_pid" 2>/dev/null; }
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [[ -n "$nvmet" ]]; then
  mkdir -p "$work/share"
  fwd=$((14400 + RANDOM % 500))
  nqn=nqn.2024-01.io.example:ram1
  GUEST_CACHE=${GUEST_CACHE:-/var/tmp/storage-guest-e2fsprogs} \
    "$guest_dir/run-guest.sh" -f "$fwd:4420" -s "$work/share" "$guest_dir/tests/50-nvmet-serve.sh" "$nqn" 256 300 >"$work/guest.log" 2>&1 &
  guest_pid=$!
  for _ in $(seq 300); do [[ -e "$work/share/ready" ]] && break; kill -0 "$guest_pid" 2>/dev/null || break; sleep 1; done
  [[ -e "$work/share/ready" ]] || { tail -20 "$work/guest.log"; echo "nvme-bench: the guest's nvmet never came up" >&2; exit 1; }
  echo "== strata-nvme-perf against Linux nvmet-tcp (guest, through 127.0.0.1:$fwd)"
  "$bin/strata-nvme-perf" --port "$fwd" --nqn "$nqn" --verify --depth 16 --queues 2 --region-mib 32
  "$bin/strata-nvme-perf" --port "$fwd" --nqn "$nqn" --verify --depth 4 --bs 65536 --digests --region-mib 32
  touch "$work/share/done"; wait "$guest_pid" || true; guest_pid=
fi

iscsi_port=$((14900 + RANDOM % 500))
nvme_port=$((iscsi_port + 1))
nqn=nqn.2026-11.io.strata:bench
start_target() {  # start_target LOOPS
  "$bin/strata-iscsi-target" --listen 127.0.0.1:$iscsi_port --nvme-listen 127.0.0.1:$nvme_port --target iqn.2026-11.io.strata:bench \
    --nqn "$nqn" --lun-mib 256 --block-size 4096 --loops "$1" >"$work/target.out" 2>&1 &
  target_pid=$!
  for _ in $(seq 100); do grep -q '^nvme listening' "$work/target.out" && break; sleep 0.05; done
  # Fill the LUN once, so that reads read written blocks.
  "$bin/strata-nvme-perf" --port $nvme_port --nqn "$nqn" --verify --depth 32 >/dev/null
}
stop_target() { kill "$target_pid"; wait "$target_pid" 2>/dev/null || true; target_pid=; }
start_target 1
url=iscsi://127.0.0.1:$iscsi_port/iqn.2026-11.io.strata:bench/0

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick_hz=$(getconf CLK_TCK)
run() {  # run PROTOCOL RW QD [QUEUES] -> "iops cpu_us_per_io"
  local protocol=$1 rw=$2 qd=$3 queues=${4:-1} before after iops
  before=$(cpu_ticks "$target_pid")
  if [[ $protocol == nvme ]]; then
    iops=$("$bin/strata-nvme-perf" --port $nvme_port --nqn "$nqn" --rw "rand$rw" --depth "$qd" --queues "$queues" --seconds "$seconds" |
           sed -n 's/.* iops=\([0-9]*\) .*/\1/p')
  else
    # One session per queue, each its own initiator: their IOPS summed.
    # -b counts the LUN's 4096-byte blocks: 1 is 4 KiB, as NVMe/TCP's reads.
    local q
    for ((q = 0; q < queues; ++q)); do
      timeout $((seconds + 20)) iscsi-perf -i "iqn.2026-11.io.strata:bench-host-$q" -m "$qd" -b 1 -r -t "$seconds" "$url" \
        >"$work/perf.$q" 2>&1 &
    done
    wait
    iops=$(for ((q = 0; q < queues; ++q)); do
             tr '\r' '\n' <"$work/perf.$q" | sed -n 's/^iops average \([0-9]*\).*/\1/p' | tail -1
           done | awk '{ s += $1 } END { print s + 0 }')
  fi
  after=$(cpu_ticks "$target_pid")
  awk -v i="${iops:-0}" -v t=$((after - before)) -v hz="$tick_hz" -v s="$seconds" \
      'BEGIN { n = i * s; printf "%d %.1f\n", i, (n > 0 ? t / hz * 1e6 / n : 0) }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "== Strata NVMe/TCP against Strata iSCSI: one 256 MiB memory LUN, one connection, 1 loop, medians of $repeat runs of ${seconds} s"
printf "%-6s %-6s %4s %10s %12s %16s\n" proto rw QD IOPS "CPU us/IO" "IOPS/CPU-s"
for rw in read write; do
  for qd in 1 32; do
    protocols=(nvme iscsi)
    [[ $rw == write ]] && protocols=(nvme)
    declare -A iops_list=() cpu_list=() med_iops=() med_cpu=()
    for ((r = 0; r < repeat; ++r)); do
      for p in "${protocols[@]}"; do
        read -r i c < <(run "$p" "$rw" "$qd")
        iops_list[$p]+="$i "
        cpu_list[$p]+="$c "
      done
    done
    for p in "${protocols[@]}"; do
      med_iops[$p]=$(tr ' ' '\n' <<<"${iops_list[$p]}" | grep . | median)
      med_cpu[$p]=$(tr ' ' '\n' <<<"${cpu_list[$p]}" | grep . | median)
      printf "%-6s %-6s %4d %10s %12s %16.0f\n" "$p" "$rw" "$qd" "${med_iops[$p]}" "${med_cpu[$p]}" \
        "$(awk -v c="${med_cpu[$p]}" 'BEGIN { print (c > 0 ? 1e6 / c : 0) }')"
    done
    if [[ $rw == read ]]; then
      awk -v ni="${med_iops[nvme]}" -v ii="${med_iops[iscsi]}" -v nc="${med_cpu[nvme]}" -v ic="${med_cpu[iscsi]}" -v qd="$qd" \
        'BEGIN { printf "  QD %d reads: NVMe/TCP over iSCSI: IOPS %.2fx, IOPS per CPU-second %.2fx (goal >= 1.3x)\n", qd, (ii > 0 ? ni / ii : 0), (nc > 0 ? ic / nc : 0) }'
    fi
  done
done

stop_target
echo "== 1 loop against 2: 2 connections x QD 32 (NVMe/TCP: 2 queues; iSCSI: 2 sessions), 4 KiB random reads, medians of $repeat runs"
printf "%-6s %-6s %10s %12s %16s\n" proto loops IOPS "CPU us/IO" "IOPS/CPU-s"
declare -A loop_iops=() loop_cpu=()
for ((r = 0; r < repeat; ++r)); do
  for l in 1 2; do
    start_target "$l"
    for p in nvme iscsi; do
      read -r i c < <(run "$p" read 32 2)
      loop_iops[$p$l]+="$i "
      loop_cpu[$p$l]+="$c "
    done
    stop_target
  done
done
declare -A med_l=() med_lc=()
for p in nvme iscsi; do
  for l in 1 2; do
    med_l[$p$l]=$(tr ' ' '\n' <<<"${loop_iops[$p$l]}" | grep . | median)
    med_lc[$p$l]=$(tr ' ' '\n' <<<"${loop_cpu[$p$l]}" | grep . | median)
    printf "%-6s %-6s %10s %12s %16.0f\n" "$p" "$l" "${med_l[$p$l]}" "${med_lc[$p$l]}" \
      "$(awk -v c="${med_lc[$p$l]}" 'BEGIN { print (c > 0 ? 1e6 / c : 0) }')"
  done
  awk -v a="${med_l[${p}1]}" -v b="${med_l[${p}2]}" -v cores="$(nproc)" -v p="$p" \
    'BEGIN { printf "  %s, 2 loops over 1: IOPS %.2fx (goal >= 1.6x with a core to spare; this machine has %d cores, shared with the initiator)\n", p, (a > 0 ? b / a : 0), cores }'
done
