# What the stratad end-to-end scripts share (sourced): checks that print
# "ok:" or "FAIL:" and set `failed`, and the wait for a started stratad.
failed=0
# The failed checks' names, repeated last by logs_if_failed: CI shows the
# end of a long output, and that is where they must be.
failures=()
# check WHAT COMMAND...: runs it; its status is the check's
check() { local what=$1; shift; if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failed=1; failures+=("$what"); fi; }
quiet() { "$@" >/dev/null; }
# within SECONDS COMMAND...: COMMAND succeeds within SECONDS (tried every 0.5 s)
within() { local t=$1; shift; for _ in $(seq $((t * 2))); do "$@" && return 0; sleep 0.5; done; return 1; }
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
  if ((${#failures[@]})); then
    echo "---- what failed"
    printf 'FAIL: %s\n' "${failures[@]}"
  fi
  # Last of all, where CI's shortened output keeps it: how a controller
  # that died went (a sanitizer's report, a broken invariant, a signal).
  for f in "$@"; do
    [[ -s "$f" ]] || continue
    grep -m 12 -E "ERROR: AddressSanitizer|runtime error|SUMMARY: |invariant|Assertion|terminate called|Segmentation|Aborted|#[0-9] 0x" "$f" |
      sed "s|^|$(basename "$f"): |"
  done
  return 0
}
# kill_all PID...: kills (-9) each daemon named, skipping empty names, for
# the exit trap. Scripts that point `pid` at controller b for wait_ready
# keep a's in `saved` meanwhile, and name it too: a failed start of b must
# not leave a running (it did once, holding its ports after the test).
kill_all() {
  local p
  for p in "$@"; do [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null; done
  return 0
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
