#!/usr/bin/env bash
# Installs what is missing, builds the optimized tree, and starts the array
# on its embedded default (README.md): both controllers over one simulated
# shelf, controller a on 127.0.0.1 and b on 127.0.0.2 (iSCSI 3260, API
# 50051 on each; the partner link on 127.0.0.2:3270), state in
# DIR/a, DIR/b and the shelf in DIR/shelf (DIR: --state-dir, default
# /var/lib/strata). A builds the two controllers' default (a pool each) and
# hands b its pool once b has joined. SIGTERM or Ctrl-C stops both cleanly.
# Other arguments go to both stratads.
#
#   tools/run.sh [--state-dir DIR] [STRATAD ARGS...]
#   tools/run.sh --single [STRATAD ARGS...]   one controller, as before:
#                                             stratad on its own (--state-dir
#                                             DIR, default /var/lib/strata)
# A state directory that holds a single controller's array already
# (DIR/config) is started single, as it was built.
set -euo pipefail
cd "$(dirname "$0")/.."

single=
state=/var/lib/strata
args=()
while (($#)); do
  case $1 in
    --single) single=1; shift ;;
    --state-dir) state=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done

tools/install-deps.sh
cmake --preset release > /dev/null
cmake --build --preset release
stratad=build/release/controller/stratad
if [[ -n "$single" || -e "$state/config" ]]; then
  [[ -z "$single" ]] && echo "run.sh: $state holds a single controller's array: starting it alone (--single)" >&2
  exec "$stratad" --state-dir "$state" "${args[@]}"
fi

mkdir -p "$state"
pid_a=
pid_b=
stop() {
  trap - INT TERM
  [[ -n "$pid_b" ]] && kill -TERM "$pid_b" 2>/dev/null
  [[ -n "$pid_a" ]] && kill -TERM "$pid_a" 2>/dev/null
  wait
}
trap stop INT TERM
"$stratad" --state-dir "$state/a" --shelf "$state/shelf" --iscsi 127.0.0.1:3260 --grpc 127.0.0.1:50051 \
  --partner-link 127.0.0.2:3270 "${args[@]}" &
pid_a=$!
# b joins the array a builds: it reads the array's identity from the shelf,
# so it starts once a is ready (it waits for the link on its own after that).
until build/release/tools/strata --api 127.0.0.1:50051 controller list >/dev/null 2>&1; do  # a's API is up last: a is ready
  kill -0 "$pid_a" 2>/dev/null || { wait "$pid_a"; exit $?; }
  sleep 0.5
done
"$stratad" --controller b --state-dir "$state/b" --shelf "$state/shelf" --iscsi 127.0.0.2:3260 --grpc 127.0.0.2:50051 \
  --partner-link 127.0.0.2:3270 "${args[@]}" &
pid_b=$!
# Either one stopping on its own stops the other.
wait -n || true
stop
