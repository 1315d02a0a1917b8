#!/usr/bin/env bash
# Installs what is missing, checks the sources' format, builds Strata twice
# -- optimized, and with AddressSanitizer + UndefinedBehaviorSanitizer --
# and runs every test in both builds. Exits non-zero if anything fails.
# This is what CI runs.
#
#   tools/test.sh           everything (CI)
#   tools/test.sh --quick   the developers' loop: the optimized build, its
#                           unit tests and the simulation's CI seeds (ctest
#                           label "quick"); budget 5 minutes incremental
#
# Both builds compile through ccache (README: "The compiler cache"); the
# table printed last gives each phase's time, the cache's hits in each
# build, and the run against its budget.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false
case "${1:-}" in
  "") ;;
  --quick) quick=true ;;
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "test.sh: unknown argument $1 (--quick, or none)" >&2; exit 2 ;;
esac

# The budgets (issue 46), in seconds: a machine that built the same commit
# before (the compiler cache warm) runs the whole command in 25 minutes;
# bare Debian (no packages, an empty cache) in 60; --quick in 5.
budget_warm_s=$((25 * 60))
budget_cold_s=$((60 * 60))
budget_quick_s=$((5 * 60))

# ccache's hit and miss counts so far (its own counters, summed over the
# direct and preprocessor modes); 0 0 without ccache.
cache_counts() {
  command -v ccache > /dev/null || { echo "0 0"; return; }
  ccache --print-stats 2> /dev/null | awk -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hits += $2 }
    $1 == "cache_miss" { misses += $2 }
    END { print hits + 0, misses + 0 }'
}
read -r run_hits0 run_misses0 < <(cache_counts)

# How long each phase took, printed last (also when one fails), so that
# the end of CI's log says where its time went; a build phase also says
# how many of its compiles the cache answered.
phases=()
phase_start=$SECONDS
read -r phase_hits0 phase_misses0 < <(cache_counts)
phase_done() {
  local hits misses compiles cache=""
  read -r hits misses < <(cache_counts)
  compiles=$((hits - phase_hits0 + misses - phase_misses0))
  if ((compiles > 0)); then
    cache=$(printf 'ccache: %d of %d compiles hit (%d%%)' $((hits - phase_hits0)) "$compiles" \
      $((100 * (hits - phase_hits0) / compiles)))
  fi
  phases+=("$(printf '%-26s %5d s   %s' "$1" $((SECONDS - phase_start)) "$cache")")
  phase_start=$SECONDS
  phase_hits0=$hits
  phase_misses0=$misses
}
print_phases() {
  local status=$?
  local hits misses compiles rate=0 budget kind
  read -r hits misses < <(cache_counts)
  hits=$((hits - run_hits0))
  compiles=$((hits + misses - run_misses0))
  ((compiles == 0)) || rate=$((100 * hits / compiles))
  if $quick; then
    budget=$budget_quick_s kind="--quick"
  elif ((compiles == 0 || rate >= 95)); then  # nothing to compile: warmer still
    budget=$budget_warm_s kind="warm: ${rate}% of the compiles hit the cache"
  else
    budget=$budget_cold_s kind="cold: ${rate}% of the compiles hit the cache"
  fi
  echo "== time by phase (whole run: ${SECONDS} s) =="
  printf '  %s\n' "${phases[@]}"
  if ((SECONDS <= budget)); then
    printf '  budget: %d s of %d s (%s): within\n' "$SECONDS" "$budget" "$kind"
  else
    printf '  budget: %d s of %d s (%s): OVER BUDGET\n' "$SECONDS" "$budget" "$kind"
  fi
  ((compiles == 0)) || echo "  ccache, whole run: $hits of $compiles compiles hit (${rate}%)"
  exit "$status"
}
trap print_phases EXIT

tools/install-deps.sh
phase_done "install-deps"
# Unformatted sources fail the run, but at its end: the tests' result is
# worth having either way (tools/format.sh formats them).
format_ok=true
tools/format.sh --check || format_ok=false
phase_done "format check"

if $quick; then
  cmake --preset release > /dev/null
  cmake --build --preset release
  phase_done "release: build"
  ctest --preset quick || { phase_done "quick tests (FAILED)"; exit 8; }
  phase_done "quick tests"
  $format_ok || { echo "test.sh: unformatted sources (above): run tools/format.sh" >&2; exit 9; }
  exit 0
fi

# The Debian test guest's image, which the guest tests would otherwise
# build first (mostly downloading Debian's packages): built meanwhile,
# while the code compiles. The tests take the image's lock, so they wait
# for this build or find the image ready; if it fails, they try again
# and say why.
if [[ "$(id -u)" = 0 ]]; then
  (
    . tests/target/guest/host_lib.sh
    [[ -x "$guest_dir/run-guest.sh" ]] && "$guest_dir/run-guest.sh" -b
  ) >/tmp/strata-guest-image.log 2>&1 &
fi
for preset in release asan; do
  echo "== ${preset}: configure, build, test =="
  cmake --preset "${preset}" > /dev/null
  cmake --build --preset "${preset}"
  phase_done "${preset}: build"
  # A failing test ends the run, after the phases are printed.
  ctest --preset "${preset}" --parallel 2 || { phase_done "${preset}: tests (FAILED)"; exit 8; }
  phase_done "${preset}: tests"
done
$format_ok || { echo "test.sh: unformatted sources (above): run tools/format.sh" >&2; exit 9; }
