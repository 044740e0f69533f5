#!/usr/bin/env bash
# Checks the flywheel command's user-facing contract: help lists the commands, config print
# shows the effective config, and a bad config exits non-zero naming key and suggestion.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

help=$("$FLYWHEEL" --help) || fail "--help exited non-zero"
grep -q "config" <<<"$help" || fail "--help does not list 'config': $help"

out=$("$FLYWHEEL" config print "$SOURCE/examples/guess.toml") || fail "config print of the example failed"
grep -q "^\[model\]" <<<"$out" || fail "printed config lacks [model]: $out"
grep -q "hidden_size = " <<<"$out" || fail "printed config lacks defaults: $out"

printf '[model]\nhiden_size = 64\n' >"$TMP/bad.toml"
err=$("$FLYWHEEL" config print "$TMP/bad.toml" 2>&1)
rc=$?
[[ $rc -ne 0 ]] || fail "config print of a bad file exited 0"
grep -q "unknown key model.hiden_size, did you mean model.hidden_size?" <<<"$err" ||
  fail "bad config error lacks key path and suggestion: $err"

err=$("$FLYWHEEL" config print "$SOURCE/examples/guess.toml" --set model.num_layerz=3 2>&1)
[[ $? -ne 0 ]] || fail "a mistyped --set exited 0"
grep -q -- "--set: unknown key model.num_layerz, did you mean model.num_layers?" <<<"$err" ||
  fail "--set error unclear: $err"

out=$("$FLYWHEEL" config print "$SOURCE/examples/guess.toml" --set model.num_layers=5) ||
  fail "--set override failed"
grep -q "num_layers = 5" <<<"$out" || fail "--set did not apply: $out"

"$FLYWHEEL" --log-level loud config print "$SOURCE/examples/guess.toml" >/dev/null 2>&1 &&
  fail "an unknown --log-level was accepted"

out=$("$FLYWHEEL" bench matmul --quick --out "$TMP/m.json") || fail "bench matmul failed: $out"
check_json() { /usr/bin/python3 "$SOURCE/bench/check_json.py" "$@" || fail "bench JSON $1: values above"; }
check_json "$TMP/m.json" 'peak_gflops>0'
out=$("$FLYWHEEL" bench packing --quick --out "$TMP/p.json") || fail "bench packing failed: $out"
check_json "$TMP/p.json" 'padding_waste>=0' 'padding_waste<1'

out=$("$FLYWHEEL" trajectory stats "$SOURCE/examples/calls/repair-calls.jsonl") ||
  fail "trajectory stats failed: $out"
grep -q "0.500 (partial)" <<<"$out" || fail "trajectory stats lacks the partial reward: $out"
printf 'not json\n' >"$TMP/calls.jsonl"
err=$("$FLYWHEEL" trajectory stats "$TMP/calls.jsonl" 2>&1) && fail "a malformed call log was accepted"
grep -q "calls.jsonl:1:" <<<"$err" || fail "call log error lacks the line: $err"
out=$(cd "$SOURCE" && "$FLYWHEEL" env check -- python3 examples/envs/guess_env.py) ||
  fail "env check of the example environment exited non-zero: $out"
grep -q "^passed" <<<"$out" || fail "env check of the example did not pass: $out"

out=$(cd "$SOURCE" && "$FLYWHEEL" env check --timeout 5 -- python3 examples/envs/broken/bad_protocol_env.py)
[[ $? -ne 0 ]] || fail "env check of the broken environment exited 0"
grep -q "VIOLATION  hello: hello has protocol_version 0" <<<"$out" ||
  fail "env check did not name the version violation: $out"

out=$("$FLYWHEEL" env play "$SOURCE/examples/guess.toml" --policy expert --episodes 50) ||
  fail "env play failed: $out"
# Solving earns 1, plus guess.toml's progress_reward 0.9 for ruling out the whole range.
grep -q "mean reward 1.900" <<<"$out" || fail "the guess expert did not solve every episode: $out"

out=$("$FLYWHEEL" bench env_executor --quick --out "$TMP/e.json") || fail "bench env_executor failed: $out"
check_json "$TMP/e.json" 'throughput_vs_blocking_pool>0' 'throughput_vs_event_loop>0' 'results.*.mean_reward>0'

out=$(cd "$SOURCE" && "$FLYWHEEL" env play examples/guess_process.toml --policy random --episodes 20) ||
  fail "env play of the process example failed: $out"
grep -q "process(guess" <<<"$out" || fail "env play did not run the process environment: $out"

# flywheel sim: the example writes a run directory; a mistyped key is named with a suggestion.
out=$("$FLYWHEEL" sim "$SOURCE/examples/sim-elastic.toml" --out "$TMP/sim" --set run.max_steps=5) ||
  fail "flywheel sim of the example failed: $out"
grep -q "^run $TMP/sim: elastic on 64 devices: 5 steps" <<<"$out" || fail "sim headline unclear: $out"
[[ $(wc -l <"$TMP/sim/metrics.jsonl") -eq 5 ]] || fail "sim metrics.jsonl does not have 5 steps"
grep -q '"simulated": true' "$TMP/sim/summary.json" || fail "sim summary.json lacks simulated"
err=$("$FLYWHEEL" sim "$SOURCE/examples/sim-elastic.toml" --set cluster.device=8 2>&1) &&
  fail "flywheel sim accepted cluster.device"
grep -q "did you mean cluster.devices?" <<<"$err" || fail "sim config error lacks suggestion: $err"
err=$("$FLYWHEEL" sim 2>&1) && fail "flywheel sim ran without a config"
grep -qi "config" <<<"$err" || fail "flywheel sim without a config does not say so: $err"

# flywheel sim calibrate: a small guess job measured, its simulator config written and simulated.
out=$("$FLYWHEEL" sim calibrate "$SOURCE/examples/guess.toml" --episodes 16 --out "$TMP/guess-sim.toml" \
  --report "$TMP/guess-calibration.json" --set run.batch_groups=2 --set actor.group_size=4 \
  --set actor.episodes_in_flight=8 --set env.latency.mean_ms=1 --set run.max_steps=3) ||
  fail "flywheel sim calibrate failed: $out"
grep -q "simulate it with: flywheel sim $TMP/guess-sim.toml" <<<"$out" || fail "calibrate output unclear: $out"
grep -q "^#   decode step of b sequences" "$TMP/guess-sim.toml" || fail "calibrated config lacks its measurements"
grep -q '"decode_points"' "$TMP/guess-calibration.json" || fail "calibration report lacks decode_points"
out=$("$FLYWHEEL" sim "$TMP/guess-sim.toml" --out "$TMP/guess-sim") || fail "the calibrated config does not simulate: $out"
grep -q "^run $TMP/guess-sim: async on 2 devices: 3 steps" <<<"$out" || fail "calibrated sim headline: $out"
err=$("$FLYWHEEL" sim calibrate "$TMP/none.toml" 2>&1) && fail "calibrate accepted a missing file"
grep -q "none.toml" <<<"$err" || fail "calibrate error does not name the file: $err"

# flywheel plan: a recommendation with its latency sensitivity.
out=$("$FLYWHEEL" plan "$SOURCE/examples/sim-elastic.toml" --steps 3) || fail "flywheel plan failed: $out"
grep -q "^recommended (fastest on the budget):" <<<"$out" || fail "plan printed no recommendation: $out"
grep -q "environment latency x2:" <<<"$out" || fail "plan printed no latency sensitivity: $out"

echo "cli_test: $failures failures"
exit $((failures > 0))
