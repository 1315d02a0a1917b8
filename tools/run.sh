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
# As an appliance's watchdog does, a controller that dies on its own (a
# crash, kill -9) is left down until its partner has taken its pools over
# (the LUNs stay served through the partner's portal; at most 60 s), and
# is then started again: it rejoins, and its pools fail back to it. At
# the fifth death within ten minutes run.sh stops both, and exits 1; so
# it does when both are down.
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
cli=build/release/tools/strata
declare -A pid=() address=([a]=127.0.0.1 [b]=127.0.0.2) partner=([a]=b [b]=a)
deaths=()  # when a controller died, in seconds (an indexed array: the guard counts them)
# start NAME: starts controller NAME in the background.
start() {
  local name=$1
  local role=()
  [[ $name == b ]] && role=(--controller b)
  "$stratad" "${role[@]}" --state-dir "$state/$name" --shelf "$state/shelf" --iscsi "${address[$name]}:3260" \
    --grpc "${address[$name]}:50051" --partner-link 127.0.0.2:3270 "${args[@]}" &
  pid[$name]=$!
}
stop() {
  trap - INT TERM
  [[ -n "${pid[b]:-}" ]] && kill -TERM "${pid[b]}" 2>/dev/null
  [[ -n "${pid[a]:-}" ]] && kill -TERM "${pid[a]}" 2>/dev/null
  wait
}
trap 'stop; exit 0' INT TERM
start a
# b joins the array a builds: it reads the array's identity from the shelf,
# so it starts once a is ready (it waits for the link on its own after that).
until "$cli" --api 127.0.0.1:50051 controller list >/dev/null 2>&1; do  # a's API is up last: a is ready
  kill -0 "${pid[a]}" 2>/dev/null || { wait "${pid[a]}"; exit $?; }
  sleep 0.5
done
start b
# taken_over DEAD: the partner of DEAD answers, and owns every pool DEAD did.
taken_over() {
  local json
  json=$("$cli" --api "${address[${partner[$1]}]}:50051" --json pool list 2>/dev/null) || return 1
  ! grep -q "\"owner\": *\"controllers/$1\"" <<<"$json"
}
while true; do
  status=0
  wait -n -p exited || status=$?
  dead=
  for name in a b; do [[ "${pid[$name]}" == "${exited:-}" ]] && dead=$name; done
  [[ -n "$dead" ]] || continue
  alive=${partner[$dead]}
  if ! kill -0 "${pid[$alive]}" 2>/dev/null; then
    echo "run.sh: controller $dead stopped (status $status), and $alive is down too: stopping" >&2
    stop
    exit 1
  fi
  now=$(date +%s)
  deaths+=("$now")
  recent=0
  for t in "${deaths[@]}"; do ((now - t < 600)) && recent=$((recent + 1)); done
  if ((recent >= 5)); then
    echo "run.sh: controller $dead stopped (status $status), the fifth death in ten minutes: stopping both" >&2
    stop
    exit 1
  fi
  echo "run.sh: controller $dead stopped (status $status): $alive takes its pools over; $dead restarts once it has" >&2
  for _ in $(seq 120); do
    taken_over "$dead" && break
    kill -0 "${pid[$alive]}" 2>/dev/null || break
    sleep 0.5
  done
  echo "run.sh: restarting controller $dead (its pools fail back to it once it has caught up)" >&2
  start "$dead"
done
