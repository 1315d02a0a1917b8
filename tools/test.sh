#!/usr/bin/env bash
# Installs what is missing, builds Strata twice -- optimized, and with
# AddressSanitizer + UndefinedBehaviorSanitizer -- and runs every test in
# both builds. Exits non-zero if anything fails. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
for preset in release asan; do
  echo "== ${preset}: configure, build, test =="
  cmake --preset "${preset}" > /dev/null
  cmake --build --preset "${preset}"
  ctest --preset "${preset}" --parallel 2
done
