#!/usr/bin/env bash
# Installs what is missing, builds the optimized tree, and runs Strata's main
# job on its embedded default.
#
# Until the daemon (stratad) exists, the main job is the block-device
# benchmark: Strata's io_uring file device against fio on files under /tmp
# and /dev/shm, and the simulated shelf's HDD and SSD models at queue depths
# 1, 8 and 32. Arguments are passed to strata-bdevperf (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
cmake --preset release > /dev/null
cmake --build --preset release
echo "== strata-bdevperf: the block-device benchmark (stratad arrives with a later issue) =="
exec build/release/tools/strata-bdevperf "$@"
