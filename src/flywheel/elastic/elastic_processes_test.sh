#!/usr/bin/env bash
# The elastic job as separate processes on 127.0.0.1 with an auth token: `flywheel serve
# buffer`, the core (`flywheel learner --scheduler-listen`) and `flywheel cell`s. Two cells
# register; one is SIGKILLed while it rolls out: the core must declare it dead, give its
# unfinished episodes back to admission and keep stepping. A replacement cell registers, takes
# the free satellite slot, and later leaves on SIGTERM (the core logs it as left, not lost).
# The run must reach max_steps with satellites having trained in its steps, and every process
# must end cleanly. Also: an unreachable core, a missing --scheduler-listen and a cell started
# from another config fail with errors that name what to fix.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$(dirname "$0")/../runtime/process_test_lib.sh"
RUN="$TMP/runs/elastic"
METRICS="$RUN/metrics.jsonl"
metrics_lines() { [[ -f "$METRICS" ]] && wc -l <"$METRICS" || echo 0; }
has_lines() { (($(metrics_lines) >= $1)); }
# events KIND: how many scheduler.jsonl lines have "event": KIND.
events() {
  local n
  n=$(grep -c "\"event\":\"$1\"" "$RUN/scheduler.jsonl" 2>/dev/null)
  echo "${n:-0}"
}
has_event() { (($(events "$1") >= 1)); }

echo "token-$RANDOM-$RANDOM" >"$TMP/token"
CONFIG="$SOURCE/examples/copy.toml"
# η = 0, and a model large enough that a step's micro-steps queue up for the satellites to claim
# (with the example's tiny model the core alone keeps up and the satellites have nothing to do):
# strings of 12-16 digits in 64-token micro-batches make each group several micro-steps, and a
# short min residence lets a satellite that went back to rollout for a batch train again in the
# same step. A satellite only claims what the core cannot run now (micro_step_queue.h), so with
# one micro-step per group and a 0.5 s residence some runs had no satellite micro-step at all.
# The 40 steps take about 45 s alone; beside the rest of CI one run needed more than its 150 s
# budget (step 39 of 40), hence 300 s, a bound the run ends well before.
SETS=(run.mode='"elastic"' run.runs_dir="\"$TMP/runs\"" run.name='"elastic"' run.max_steps=40
      run.max_wall_seconds=$((300 * SCALE)) run.batch_groups=4 actor.group_size=4 actor.episodes_in_flight=8
      learner.max_staleness=0 learner.token_budget=64 learner.buckets=[64]
      learner.checkpoint_every=10 scheduler.cells=3 scheduler.min_residence_seconds=0.1
      scheduler.release_backlog_batches=0.3 scheduler.recall_backlog_batches=0.1
      model.hidden_size=256 model.num_layers=4 model.intermediate_size=688
      scheduler.heartbeat_seconds=0.1 scheduler.heartbeat_timeout_seconds=$((2 * SCALE))
      env.latency.mean_ms=5 env.copy.min_length=12 env.copy.max_length=16)

err=$("$FLYWHEEL" cell "$CONFIG" --scheduler 127.0.0.1:1 --buffer 127.0.0.1:1 \
      --connect-timeout 1 --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "a cell with no core to reach exited 0"
grep -q "scheduler at 127.0.0.1:1" <<<"$err" || fail "unreachable core error unclear: $err"

"$FLYWHEEL" --log-level warn serve buffer --config "$CONFIG" --set buffer.group_size=4 \
  buffer.max_size=64 --address 127.0.0.1:0 --auth-token-file "$TMP/token" >"$TMP/buffer.log" 2>&1 &
BUFFER_PID=$!
PIDS+=("$BUFFER_PID")
wait_for 20 grep -qs "serving on" "$TMP/buffer.log" || die "the buffer did not start"
BUFFER=$(sed -n 's/.*serving on \([0-9.:]*\) .*/\1/p' "$TMP/buffer.log")

err=$("$FLYWHEEL" learner "$CONFIG" --buffer "$BUFFER" --auth-token-file "$TMP/token" \
      --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "an elastic learner without --scheduler-listen exited 0"
grep -q "give --scheduler-listen" <<<"$err" || fail "missing --scheduler-listen error unclear: $err"

"$FLYWHEEL" --log-level warn learner "$CONFIG" --buffer "$BUFFER" --weights-listen 127.0.0.1:0 \
  --scheduler-listen 127.0.0.1:0 --auth-token-file "$TMP/token" --set "${SETS[@]}" \
  >"$TMP/core.log" 2>&1 &
CORE_PID=$!
PIDS+=("$CORE_PID")
wait_for 30 grep -qs "scheduler on" "$TMP/core.log" || die "the core did not start"
SCHEDULER=$(sed -n 's/.*scheduler on \([0-9.:]*\) .*/\1/p' "$TMP/core.log")

# A cell built from another config is refused, naming the hash.
err=$("$FLYWHEEL" cell "$CONFIG" --scheduler "$SCHEDULER" --buffer "$BUFFER" \
      --auth-token-file "$TMP/token" --set "${SETS[@]}" learner.lr=0.5 2>&1)
[[ $? -ne 0 ]] || fail "a cell with another config exited 0"
grep -q "config hash" <<<"$err" || fail "config mismatch error unclear: $err"

start_cell() {
  "$FLYWHEEL" --log-level warn cell "$CONFIG" --scheduler "$SCHEDULER" --buffer "$BUFFER" \
    --auth-token-file "$TMP/token" --set "${SETS[@]}" >"$TMP/$1.log" 2>&1 &
}
start_cell cell-a
CELL_A=$!
start_cell victim
VICTIM=$!
PIDS+=("$CELL_A" "$VICTIM")
wait_for 90 has_lines 4 || die "the core made no 4 steps with two cells"

# Kill the victim while it rolls out (its last switch, if any, was to rollout): its micro-steps
# are not in a reduce, its episodes in flight are lost with it.
rolling_out() { ! tail -n 1 "$TMP/victim.log" | grep -q "to train"; }
wait_for 30 rolling_out || fail "the victim never rolled out"
kill -9 "$VICTIM"
wait "$VICTIM" 2>/dev/null
KILL_LINES=$(metrics_lines)
echo "killed the victim cell after $KILL_LINES steps"
wait_for 20 has_event cell_lost || fail "the core did not declare the killed cell dead"

start_cell replacement
REPLACEMENT=$!
PIDS+=("$REPLACEMENT")
placed_three() { (($(events cell_placed) >= 3)); }
wait_for 30 placed_three || fail "the replacement cell was not given the free slot"
after_replacement=$(($(metrics_lines) + 3))
wait_for 60 has_lines "$after_replacement" || fail "no steps after the replacement joined"
kill -TERM "$REPLACEMENT"
wait_exit "$REPLACEMENT" 30
[[ "$STATUS" == 0 ]] || fail "the replacement cell did not exit 0 on SIGTERM (status $STATUS)"
grep -q "stopped (stop request)" "$TMP/replacement.log" ||
  fail "the replacement cell did not say why it stopped"
wait_for 10 has_event cell_left || fail "the core did not log the replacement as left"

wait_exit "$CORE_PID" 300
[[ "$STATUS" == 0 ]] || fail "the core did not exit 0 (status $STATUS)"
SUMMARY="$RUN/summary.json"
[[ -f "$SUMMARY" ]] || die "no summary.json"
read -r steps lost registered switches trained < <(python3 -c "
import json
s = json.load(open('$SUMMARY'))
e = s['elastic']
print(s['final_step'], e['cells_lost'], e['cells_registered'], e['switches'],
      e['to_train']['count'])")
((steps == 40)) || fail "the core ended at step $steps, not max_steps 40"
((lost == 1)) || fail "cells_lost is $lost, not 1 (the SIGKILLed cell only)"
((registered == 3)) || fail "cells_registered is $registered, not 3"
((trained >= 2)) || fail "only $trained switches to train ($switches in all)"
# Satellites took part in the core's steps: some step had more than one participant, and
# satellites ran some of the micro-steps (micro_steps counts all of a step's, core_micro_steps
# the core's).
read -r max_participants joined_steps satellite_micro_steps < <(python3 -c "
import json
m = [json.loads(l) for l in open('$METRICS')]
print(max(x['participants'] for x in m), sum(x['participants'] > 1 for x in m),
      sum(x['micro_steps'] - x['core_micro_steps'] for x in m))")
((max_participants >= 2)) || fail "no step had a satellite among its participants"
((satellite_micro_steps >= 1)) || fail "the satellites ran no micro-step"
ls "$RUN/checkpoints"/*/DONE >/dev/null 2>&1 || fail "no complete checkpoint"

wait_exit "$CELL_A" 20
[[ "$STATUS" == 0 ]] || fail "cell-a did not exit 0 after the core finished (status $STATUS)"
grep -q "stopped (the core finished)" "$TMP/cell-a.log" || fail "cell-a did not say why it stopped"
kill -TERM "$BUFFER_PID"
wait_exit "$BUFFER_PID" 20
[[ "$STATUS" == 0 ]] || fail "the buffer did not exit 0 on SIGTERM (status $STATUS)"
if grep -E -l "terminate called|Segmentation|Aborted|flywheel: error:" \
  "$TMP/core.log" "$TMP/cell-a.log" "$TMP/replacement.log" "$TMP/buffer.log"; then
  fail "a process crashed or reported an error"
fi

if ((failures > 0)); then
  dump
  echo "$failures failure(s)"
  exit 1
fi
echo "elastic_processes_test: OK ($steps steps, $switches switches ($trained to train), " \
  "$max_participants participants at most, $joined_steps steps with satellites," \
  "$satellite_micro_steps micro-steps by satellites," \
  "victim killed after $KILL_LINES steps)"
