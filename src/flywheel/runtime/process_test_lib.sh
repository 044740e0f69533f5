# Shared by the tests that run flywheel processes on 127.0.0.1 (sourced, after FLYWHEEL and
# SOURCE are set): a temporary directory, the processes to kill at exit, failure counting and
# polling.
#   PIDS+=("$pid")          killed (SIGCONT first, in case it was frozen, then SIGKILL) at exit
#   fail MSG                counts a failure and goes on; die MSG dumps the logs and exits 1
#   wait_for SECONDS CMD…   polls CMD every 0.2 s until it succeeds (1 after SECONDS)
#   wait_exit PID SECONDS   sets STATUS to PID's exit status, or "running" after SECONDS
#   SCALE                   FLYWHEEL_TEST_TIME_SCALE (1 unless an instrumented build): wait_for
#                           and wait_exit multiply their SECONDS by it, and a test multiplies the
#                           wall-clock budgets it gives its runs (run.max_wall_seconds)
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill -CONT "$pid" 2>/dev/null
    kill -9 "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
SCALE=${FLYWHEEL_TEST_TIME_SCALE:-1}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# The last lines of every log in $TMP.
dump() { for f in "$TMP"/*.log; do echo "--- $f"; tail -n 25 "$f"; done; }
die() {
  echo "FAIL: $*"
  dump
  exit 1
}
wait_for() {
  local deadline=$((SECONDS + $1 * SCALE))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}
wait_exit() {
  local pid=$1 deadline=$((SECONDS + $2 * SCALE))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      STATUS=running
      return
    fi
    sleep 0.2
  done
  wait "$pid"
  STATUS=$?
}
