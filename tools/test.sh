#!/usr/bin/env bash
# Installs what is missing, builds Strata twice -- optimized, and with
# AddressSanitizer + UndefinedBehaviorSanitizer -- and runs every test in
# both builds. Exits non-zero if anything fails. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# How long each phase took, printed last (also when one fails), so that
# the end of CI's log says where its time went.
phases=()
phase_start=$SECONDS
phase_done() {
  phases+=("$(printf '%-22s %5d s' "$1" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}
print_phases() {
  echo "== time by phase (whole run: ${SECONDS} s) =="
  printf '  %s\n' "${phases[@]}"
}
trap print_phases EXIT

tools/install-deps.sh
phase_done "install-deps"
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
