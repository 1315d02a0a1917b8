#!/usr/bin/env bash
# CPU per host I/O of stratad on the embedded default, at a moderate,
# HDD-bound load, and where it goes.
#
#   tools/nvmebench/stratad-cpu.sh [--seconds S] [--depth D] [--loops N] [--spin-us U] [--region-mib M] [--profile] [--count]
#
# Starts stratad on its embedded default (the simulated shelf of model
# HDDs and SSDs, in a state directory under /var/tmp, removed at the end),
# fills a region of its volume (default 1 GiB) over NVMe/TCP, then drives
# 8 KiB random I/O, 70 % reads, at queue depth D (default 8) for S seconds
# (default 30) with strata-nvme-perf, and reports IOPS, latency and
# stratad's CPU time (all its threads, from /proc) per host I/O. With
# --profile, perf records stratad (call graphs) for 10 s of the run and
# prints where the time goes: by DSO (kernel or stratad), and the top
# symbols. With --count, perf stat counts stratad's kernel events over
# 10 s of the run (backing-file requests submitted to io_uring, system
# calls by kind, context switches) and prints each per host I/O.
set -euo pipefail
seconds=30
depth=8
loops=1
spin=100
region=1024
profile=
count=
here=$(cd "$(dirname "$0")/../.." && pwd)
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --loops) loops=$2; shift 2 ;;
    --spin-us) spin=$2; shift 2 ;;
    --region-mib) region=$2; shift 2 ;;
    --profile) profile=1; shift ;;
    --count) count=1; shift ;;
    *) echo "usage: $0 [--seconds S] [--depth D] [--loops N] [--spin-us U] [--region-mib M] [--profile] [--count]" >&2; exit 2 ;;
  esac
done
state=$(mktemp -d /var/tmp/strata-cpu-XXXXXX)
cleanup() { [[ -n "${pid:-}" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$state"; }
trap cleanup EXIT
port=$((15000 + RANDOM % 2000))
"$here/build/release/controller/stratad" --state-dir "$state" --iscsi 127.0.0.1:$port --nvme 127.0.0.1:$((port + 1)) \
  --grpc 127.0.0.1:$((port + 2)) --loops "$loops" --spin-us "$spin" >"$state/out" 2>"$state/err" &
pid=$!
for _ in $(seq 600); do grep -q "stratad is ready" "$state/out" && break; sleep 0.1; done
grep -q "stratad is ready" "$state/out" || { cat "$state/err"; echo "stratad did not start" >&2; exit 1; }
perf_tool=$here/build/release/tools/strata-nvme-perf
nqn=nqn.2026-11.io.strata:array
echo "== filling ${region} MiB of the embedded default's volume"
"$perf_tool" --port $((port + 1)) --nqn "$nqn" --verify --bs 65536 --depth 8 --region-mib "$region"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
before=$(cpu_ticks "$pid")
if [[ -n "$profile" ]]; then
  (sleep 5; perf record -F 499 -g -p "$pid" -o "$state/perf.data" -- sleep 10 >/dev/null 2>&1) &
  recorder=$!
fi
events=raw_syscalls:sys_enter,io_uring:io_uring_submit_req,syscalls:sys_enter_timerfd_settime,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_sendmsg,syscalls:sys_enter_recvmsg,syscalls:sys_enter_futex,context-switches
if [[ -n "$count" ]]; then
  (sleep 5; perf stat -x, -e "$events" -p "$pid" -o "$state/counts" -- sleep 10 >/dev/null 2>&1) &
  counter=$!
fi
result=$("$perf_tool" --port $((port + 1)) --nqn "$nqn" --bs 8192 --rw randrw --read-percent 70 --depth "$depth" \
  --seconds "$seconds" --region-mib "$region")
after=$(cpu_ticks "$pid")
echo "$result"
ios=$(sed -n 's/.* ios=\([0-9]*\) .*/\1/p' <<<"$result")
awk -v t=$((after - before)) -v hz="$hz" -v n="$ios" -v s="$seconds" -v l="$loops" \
  'BEGIN { printf "stratad (%d loops): %.2f CPU-seconds over %d s, %.0f%% of a core; %.1f us of CPU per host I/O\n", l, t / hz, s, 100 * t / hz / s, (n > 0 ? t / hz * 1e6 / n : 0) }'
if [[ -n "$count" ]]; then
  wait "$counter" || true
  echo "== stratad's kernel events per host I/O (perf stat, 10 s of the run)"
  awk -F, -v n="$ios" -v s="$seconds" '/^[0-9]/ { printf "  %-40s %8.2f\n", $3, $1 / (n / s * 10) }' "$state/counts"
fi
if [[ -n "$profile" ]]; then
  wait "$recorder" || true
  echo "== where stratad's CPU goes (perf, 10 s)"
  perf report -i "$state/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -8
  echo "-- top symbols"
  perf report -i "$state/perf.data" --no-children --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -25
fi
