# What the stratad end-to-end scripts share (sourced): checks that print
# "ok:" or "FAIL:" and set `failed`, and the wait for a started stratad.
failed=0
# check WHAT COMMAND...: runs it; its status is the check's
check() { local what=$1; shift; if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failed=1; fi; }
quiet() { "$@" >/dev/null; }
# logs_if_failed FILE...: once a check failed, the last lines of each
# controller log given (for the exit trap: a failure in CI, where the
# state directory is gone, still says what the controllers did)
logs_if_failed() {
  ((failed)) || return 0
  for f in "$@"; do
    [[ -s "$f" ]] || continue
    echo "---- the last 80 lines of $f"
    tail -n 80 "$f"
  done
}
# wait_ready OUT ERR: waits up to 30 s for stratad ($pid) to print its ready
# line in OUT. If it does not, says whether it hung or how it exited, shows
# ERR, and exits 1.
wait_ready() {
  for _ in $(seq 300); do
    grep -q "stratad is ready" "$1" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: stratad did not become ready in 30 s"
  else
    wait "$pid"
    echo "FAIL: stratad exited, status $? (128+N: signal N)"
  fi
  cat "$2"
  exit 1
}
