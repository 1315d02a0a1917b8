#!/usr/bin/env bash
# Installs what is missing, builds the optimized tree, and starts the array:
# stratad on its embedded default (README.md). Arguments go to stratad
# (--state-dir DIR, default /var/lib/strata; --iscsi ADDR:PORT).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
cmake --preset release > /dev/null
cmake --build --preset release
exec build/release/controller/stratad "$@"
