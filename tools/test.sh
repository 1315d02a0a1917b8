#!/usr/bin/env bash
# Installs what is missing, builds Strata twice -- optimized, and with
# AddressSanitizer + UndefinedBehaviorSanitizer -- and runs every test in
# both builds. Exits non-zero if anything fails. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
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
  ctest --preset "${preset}" --parallel 2
done
