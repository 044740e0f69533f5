#!/usr/bin/env bash
# Every examples/*.toml run as a user runs it: `flywheel train examples/NAME.toml` (or, for a
# cluster-simulator config, one with a [cluster] section, `flywheel sim examples/NAME.toml`) from a
# directory holding the examples (relative paths in the configs resolve as in the repository),
# with nothing changed but a short wall-clock budget. Each must train (lines in metrics.jsonl, or,
# for a job whose warm start outlasts the budget, supervised steps in summary.json), exit 0
# within the budget plus the stop bound (and its start-up), and write summary.json. Then
# SIGINT and SIGTERM each stop a job within the stop bound of the signal, summary written.
# usage: examples_test.sh FLYWHEEL SOURCE_DIR
set -euo pipefail
FLYWHEEL=$(realpath "$1")
SOURCE=$(realpath "$2")
BUDGET=${FLYWHEEL_EXAMPLE_SECONDS:-8}
# An instrumented build (scripts/sanitize) runs several times slower: the allowances below are
# multiplied by FLYWHEEL_TEST_TIME_SCALE, the wall-clock budget given to the jobs is not.
SCALE=${FLYWHEEL_TEST_TIME_SCALE:-1}
STOP_BOUND=$((5 * SCALE))   # seconds: kStopBound in src/flywheel/runtime/run_stop.h
START_UP=$((10 * SCALE))    # seconds: loading, model set-up, environment processes (a loaded 2-core machine)

fail() { echo "FAIL: $*" >&2; exit 1; }  # stderr: also seen from inside $(...)
now() { date +%s.%N; }
# seconds between two `now` readings
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
within() { awk -v x="$1" -v limit="$2" 'BEGIN { exit !(x <= limit) }'; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$SOURCE/examples" "$work/examples"
cd "$work"

# The run directory a job printed ("run runs/NAME: …") holds a summary and metrics lines.
check_run() {
  local log=$1 run
  run=$(sed -n 's/^run \([^:]*\):.*/\1/p' "$log" | tail -n 1)
  [[ -n "$run" ]] || { cat "$log"; fail "$log: no 'run DIR:' line"; }
  [[ -f "$run/summary.json" ]] || fail "$run/summary.json missing"
  if [[ ! -s "$run/metrics.jsonl" ]]; then
    /usr/bin/python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("sft", {}).get("steps", 0) < 1)' \
      "$run/summary.json" || fail "$run/metrics.jsonl is empty and no warm-start step: no training"
  fi
  echo "$run"
}

shopt -s nullglob
configs=(examples/*.toml)
((${#configs[@]} > 0)) || fail "no examples/*.toml"
for config in "${configs[@]}"; do
  name=$(basename "$config" .toml)
  if grep -q '^\[cluster\]' "$config"; then
    # A cluster-simulator config: `flywheel sim` as shipped, which runs in seconds of real time.
    start=$(now)
    "$FLYWHEEL" sim "$config" >"$name.log" 2>&1 ||
      { cat "$name.log"; fail "flywheel sim $config exited $?"; }
    took=$(elapsed "$start" "$(now)")
    run=$(check_run "$name.log")
    echo "$config: simulated $(wc -l <"$run/metrics.jsonl") learner steps in ${took} s"
    within "$took" "$BUDGET" || fail "flywheel sim $config took $took s, more than $BUDGET s"
    continue
  fi
  start=$(now)
  "$FLYWHEEL" train "$config" --set "run.max_wall_seconds=$BUDGET" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "flywheel train $config exited $?"; }
  took=$(elapsed "$start" "$(now)")
  run=$(check_run "$name.log")
  steps=$(wc -l <"$run/metrics.jsonl")
  sft=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("sft", {}).get("steps", 0))' "$run/summary.json")
  echo "$config: $sft warm-start and $steps learner steps, exited after ${took} s (budget $BUDGET s)"
  within "$took" $((BUDGET + STOP_BOUND + START_UP)) ||
    fail "$config took $took s: more than the budget $BUDGET s + stop bound + start-up"
done

# A stop signal: the process exits 0 within the stop bound, summary written.
for signal in INT TERM; do
  "$FLYWHEEL" train examples/guess_process.toml --set "run.name=\"signal-$signal\"" \
    >"signal-$signal.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 $((300 * SCALE))); do  # until it trains (a metrics line), at most 30 s
    [[ -s "runs/signal-$signal/metrics.jsonl" ]] && break
    sleep 0.1
  done
  [[ -s "runs/signal-$signal/metrics.jsonl" ]] || { kill -9 $pid; fail "SIG$signal run never trained"; }
  start=$(now)
  kill -s "$signal" $pid
  status=0
  wait $pid || status=$?
  took=$(elapsed "$start" "$(now)")
  ((status == 0)) || { cat "signal-$signal.log"; fail "SIG$signal: exit status $status"; }
  check_run "signal-$signal.log" >/dev/null
  grep -q '"stopped_by": "signal"' "runs/signal-$signal/summary.json" ||
    fail "SIG$signal: summary.json does not say stopped_by signal"
  echo "SIG$signal: exited $took s after the signal"
  within "$took" $STOP_BOUND || fail "SIG$signal: exit took $took s, more than $STOP_BOUND s"
done
echo "examples_test: all passed"
