#!/usr/bin/env bash
# The non-optimized path (issue 19): 4 KiB random reads and writes at queue
# depth 1 and 32 on LUN 0, direct through the pool's owner (controller a,
# active/optimized) against forwarded through its partner (controller b,
# active/non-optimized, which sends each command over the partner link),
# alternating, in one run. Two controllers over one simulated shelf
# (--small-shelf: 1 GiB volume v1 on model HDDs and SSDs with their
# timing). The volume is written whole first (1 MiB writes through a),
# so reads find data. Reads: iscsi-perf (libiscsi), random. Writes:
# qemu-img bench, 4 KiB at a stride of 1031 blocks over the volume (qemu-img
# has no random mode), `--writes` each run. Prints median IOPS and mean
# latency (queue depth / IOPS) of each, and forwarded/direct ratios.
#   tools/takeoverbench/forward-bench.sh [--seconds S] [--repeat N] [--writes N] [--stratad PATH]
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
stratad=$here/build/release/controller/stratad
seconds=5
repeat=3
writes=4000
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --writes) writes=$2; shift 2 ;;
    --stratad) stratad=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S] [--repeat N] [--writes N] [--stratad PATH]" >&2; exit 2 ;;
  esac
done
for tool in iscsi-perf iscsi-readcapacity16 qemu-img; do
  command -v "$tool" >/dev/null || { echo "forward-bench: $tool is missing (tools/install-deps.sh)" >&2; exit 1; }
done
source "$here/tools/takeoverbench/pair.sh"
start_a
start_b
declare -A url=([direct]=iscsi://127.0.0.1:$port/iqn.2026-11.io.strata:array/0
                [forwarded]=iscsi://127.0.0.2:$port/iqn.2026-11.io.strata:array/0)
for _ in $(seq 100); do iscsi-readcapacity16 "${url[forwarded]}" >/dev/null 2>&1 && break; sleep 0.1; done
block=$(iscsi-readcapacity16 "${url[direct]}" 2>/dev/null | sed -n 's/.*LOGICAL BLOCK LENGTH IN BYTES:\s*\([0-9]*\).*/\1/p' | head -1)
volume_bytes=$(( $(iscsi-readcapacity16 "${url[direct]}" 2>/dev/null | sed -n 's/.*Total size:\s*\([0-9]*\).*/\1/p' | head -1) ))
[[ -n "$block" && "$volume_bytes" -gt 0 ]] || { echo "forward-bench: cannot read LUN 0's capacity" >&2; exit 1; }
echo "LUN 0: $((volume_bytes >> 20)) MiB in $block-byte blocks; filling it through a" >&2
qemu-img bench -f raw -t none -w -s 1048576 -c $((volume_bytes >> 20)) -d 8 "${url[direct]}" >/dev/null 2>&1 ||
  { echo "forward-bench: the fill failed" >&2; exit 1; }

reads() {  # reads PATH QD -> IOPS
  timeout $((seconds + 30)) iscsi-perf -m "$2" -b $((4096 / block)) -r -t "$seconds" "${url[$1]}" 2>&1 |
    tr '\r' '\n' | sed -n 's/^iops average \([0-9]*\).*/\1/p' | tail -1
}
writes() {  # writes PATH QD -> IOPS
  local secs
  secs=$(timeout 600 qemu-img bench -f raw -t none -w -s 4096 -S $((4096 * 1031)) -c "$writes" -d "$2" "${url[$1]}" 2>&1 |
         sed -n 's/^Run completed in \([0-9.]*\) seconds.*/\1/p')
  awk -v s="${secs:-0}" -v n="$writes" 'BEGIN { printf "%d\n", (s > 0 ? n / s : 0) }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

printf "%-7s %3s %-10s %9s %12s\n" kind QD path IOPS "latency us"
for kind in reads writes; do
  for qd in 1 32; do
    declare -A list=()
    for ((r = 0; r < repeat; ++r)); do
      for path in direct forwarded; do list[$path]+="$($kind "$path" "$qd") "; done
    done
    declare -A med=()
    for path in direct forwarded; do
      med[$path]=$(tr ' ' '\n' <<<"${list[$path]}" | grep . | median)
      printf "%-7s %3d %-10s %9s %12.0f\n" "$kind" "$qd" "$path" "${med[$path]}" \
        "$(awk -v i="${med[$path]}" -v q="$qd" 'BEGIN { print (i > 0 ? q * 1e6 / i : 0) }')"
    done
    awk -v d="${med[direct]}" -v f="${med[forwarded]}" -v k="$kind" -v q="$qd" \
      'BEGIN { printf "  %s QD %d: forwarded/direct IOPS %.2fx\n", k, q, (d > 0 ? f / d : 0) }'
  done
done
