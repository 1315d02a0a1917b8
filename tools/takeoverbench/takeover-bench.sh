#!/usr/bin/env bash
# Takeover benchmark (issue 19): two controllers over one simulated shelf;
# controller a, the pool's owner, is killed with -9 KILLS times; each time,
# the milliseconds from the kill to the first 4 KiB read of LUN 0 completed
# through controller b's portal (the surviving path), and the takeover's
# own figure from b's event log (from b's decision to the pool served);
# then a is restarted and the pool handed back (failback: its pause, from
# b's event log). Run with 1 LUN and with 100 in the pool taken over, p1
# (99 more volumes mapped, LUNs 2-100: LUN 1 is p2's, b's own, in the two
# controllers' default).
# Prints a table of medians and p99s.
#   tools/takeoverbench/takeover-bench.sh [--kills N] [--luns N]... [--stratad PATH] [--cli PATH]
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
stratad=$here/build/release/controller/stratad
cli=$here/build/release/tools/strata
kills=20
luns_list=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --kills) kills=$2; shift 2 ;;
    --luns) luns_list+=("$2"); shift 2 ;;
    --stratad) stratad=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    *) echo "usage: $0 [--kills N] [--luns N]... [--stratad PATH] [--cli PATH]" >&2; exit 2 ;;
  esac
done
[[ ${#luns_list[@]} -eq 0 ]] && luns_list=(1 100)
command -v qemu-io >/dev/null || { echo "qemu-io is missing (tools/install-deps.sh)" >&2; exit 1; }
source "$here/tools/takeoverbench/pair.sh"
now_ms() { echo $(($(date +%s%N) / 1000000)); }
events_b() { "$cli" --api 127.0.0.2:$((port + 2)) events --limit 1000 2>/dev/null; }
count_b() { events_b | grep -c "$1"; }
wait_count_b() { for _ in $(seq 600); do [[ $(count_b "$1") -ge $2 ]] && return 0; sleep 0.05; done; return 1; }
# stats FILE: "median p99 max" of the numbers in FILE
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { m = v[int((NR + 1) / 2)]; p = v[int(NR * 0.99 + 0.999)]; if (p == "") p = v[NR]; print m, p, v[NR] }'; }

printf "%-6s %-6s %-28s %-28s %-22s\n" "P1 LUNS" KILLS "KILL->FIRST I/O ms (med p99)" "TAKEOVER ITSELF ms (med p99)" "FAILBACK ms (med p99)"
for luns in "${luns_list[@]}"; do
  rm -rf "$dir/a" "$dir/b" "$dir/shelf"
  start_a
  start_b
  # p1 (the pool a owns and b takes over) holds v1 as LUN 0 and the rest
  # from LUN 2 on; LUN 1 is p2's, b's own (the two controllers' default).
  for i in $(seq 2 "$luns"); do
    "$cli" --api 127.0.0.1:$((port + 2)) volume create "x$i" --size 256M --pool p1 >/dev/null && \
      "$cli" --api 127.0.0.1:$((port + 2)) map "x$i" --lun "$i" >/dev/null || { echo "cannot map LUN $i" >&2; exit 1; }
  done
  url_b=iscsi://127.0.0.2:$port/iqn.2026-11.io.strata:array/0
  : >"$dir/first" ; : >"$dir/inner" ; : >"$dir/back"
  for k in $(seq "$kills"); do
    # a's stderr (written anew at each start) says when b's copy is current
    for _ in $(seq 600); do grep -q "controller b holds a current copy" "$dir/a.err" && break; sleep 0.05; done
    grep -q "controller b holds a current copy" "$dir/a.err" || { echo "kill $k: b's copy never became current" >&2; exit 1; }
    sleep 0.5
    t0=$(now_ms)
    kill -9 "$pid_a"; wait "$pid_a" 2>/dev/null; pid_a=
    while ! qemu-io -f raw -c "read 0 4k" "$url_b" >/dev/null 2>&1; do sleep 0.02; done
    echo $(($(now_ms) - t0)) >>"$dir/first"
    wait_count_b "taken over from controller a" 1
    events_b | sed -n 's/.*taken over from controller a (epoch [0-9]*) in \([0-9]*\) ms.*/\1/p' | head -1 >>"$dir/inner"
    start_a
    wait_count_b "handed over to controller a, its home, in" $k || { echo "kill $k: no failback" >&2; exit 1; }
    events_b | sed -n 's/.*handed over to controller a, its home, in \([0-9]*\) ms.*/\1/p' | head -1 >>"$dir/back"
  done
  read -r fm fp _ < <(stats "$dir/first")
  read -r im ip _ < <(stats "$dir/inner")
  read -r bm bp _ < <(stats "$dir/back")
  printf "%-6s %-6s %-28s %-28s %-22s\n" "$luns" "$kills" "$fm $fp" "$im $ip" "$bm $bp"
  kill -TERM "$pid_b"; wait "$pid_b" 2>/dev/null; pid_b=
  kill -TERM "$pid_a"; wait "$pid_a" 2>/dev/null; pid_a=
done
