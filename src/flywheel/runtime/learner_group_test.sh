#!/usr/bin/env bash
# The learner as a group of 2 processes on 127.0.0.1 (`flywheel launch --nproc 2 -- learner`),
# with `flywheel serve buffer` and an actor: a short run ends with exit 0 and a summary of world
# size 2; then rank 1 is SIGKILLed mid-run and the launcher and rank 0 must exit non-zero within
# 60 s, naming rank 1. Also: bad rank flags and an unreachable rendezvous fail fast and clearly.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$(dirname "$0")/process_test_lib.sh"

CONFIG="$SOURCE/examples/guess.toml"
SETS=(run.runs_dir="\"$TMP/runs\"" run.batch_groups=2 actor.group_size=4
      actor.episodes_in_flight=8 env.latency.model='"constant"' env.latency.mean_ms=1
      learner.checkpoint_every=2)

# Bad flags: each a clear error and a non-zero exit, before anything is started.
err=$("$FLYWHEEL" learner "$CONFIG" --buffer 127.0.0.1:1 --world-size 2 --rank 2 \
      --rendezvous 127.0.0.1:29999 --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "--rank 2 --world-size 2 exited 0"
grep -q -- "--rank 2 is outside the world of 2 ranks" <<<"$err" || fail "bad rank error unclear: $err"
err=$("$FLYWHEEL" learner "$CONFIG" --buffer 127.0.0.1:1 --world-size 2 --rank 0 \
      --rendezvous 127.0.0.1:29999 --set "${SETS[@]}" learner.world_size=3 2>&1)
[[ $? -ne 0 ]] || fail "--world-size 2 with learner.world_size = 3 exited 0"
grep -q -- "--world-size 2 but learner.world_size = 3" <<<"$err" ||
  fail "world size mismatch error unclear: $err"
start=$SECONDS
err=$("$FLYWHEEL" learner "$CONFIG" --buffer 127.0.0.1:1 --world-size 2 --rank 1 \
      --rendezvous 127.0.0.1:1 --connect-timeout 2 --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "an unreachable --rendezvous exited 0"
grep -q "127.0.0.1:1" <<<"$err" || fail "unreachable rendezvous error does not name it: $err"
((SECONDS - start < 20)) || fail "the unreachable rendezvous took $((SECONDS - start)) s to fail"
echo "unreachable rendezvous: $err"

# start_job NAME MAX_STEPS: a buffer, a learner group of 2 and one actor; sets BUFFER_PID,
# LAUNCH_PID, ACTOR_PID.
start_job() {
  local name=$1 steps=$2
  "$FLYWHEEL" --log-level warn serve buffer --config "$CONFIG" --set buffer.group_size=4 \
    buffer.max_size=4 --address 127.0.0.1:0 >"$TMP/$name-buffer.log" 2>&1 &
  BUFFER_PID=$!
  PIDS+=("$BUFFER_PID")
  wait_for 20 grep -qs "serving on" "$TMP/$name-buffer.log" || die "the buffer did not start"
  local buffer
  buffer=$(sed -n 's/.*serving on \([0-9.:]*\) .*/\1/p' "$TMP/$name-buffer.log")
  "$FLYWHEEL" --log-level warn launch --nproc 2 -- learner "$CONFIG" --buffer "$buffer" \
    --weights-listen 127.0.0.1:0 --set "${SETS[@]}" run.name="\"$name\"" \
    run.max_steps="$steps" run.max_wall_seconds=$((100 * SCALE)) >"$TMP/$name-launch.log" 2>&1 &
  LAUNCH_PID=$!
  PIDS+=("$LAUNCH_PID")
  wait_for 40 grep -qs "serving weights on" "$TMP/$name-launch.log" ||
    die "rank 0 did not start serving weights"
  local weights
  weights=$(sed -n 's/.*serving weights on \([0-9.:]*\) .*/\1/p' "$TMP/$name-launch.log")
  "$FLYWHEEL" --log-level warn actor "$CONFIG" --buffer "$buffer" --weights "$weights" \
    --poll-interval 0.2 --set "${SETS[@]}" run.name="\"$name\"" >"$TMP/$name-actor.log" 2>&1 &
  ACTOR_PID=$!
  PIDS+=("$ACTOR_PID")
}

# 1. A short run to completion.
start_job ok 6
wait_exit "$LAUNCH_PID" 90
[[ "$STATUS" == 0 ]] || fail "the launch of 2 learner ranks exited $STATUS"
SUMMARY="$TMP/runs/ok/summary.json"
if [[ -f "$SUMMARY" ]]; then
  read -r world steps < <(python3 -c "
import json; s = json.load(open('$SUMMARY')); print(s['world_size'], s['final_step'])")
  [[ "$world" == 2 ]] || fail "summary world_size is $world, not 2"
  [[ "$steps" == 6 ]] || fail "summary final_step is $steps, not 6"
else
  fail "no summary.json"
fi
grep -q "^\[rank 1\] learner rank 1 of 2: followed rank 0 to step 6" "$TMP/ok-launch.log" ||
  fail "rank 1 did not follow rank 0 to step 6"
[[ ! -e "$TMP/runs/ok/rank-1" ]] || fail "rank 1 wrote into the run directory"
ls "$TMP/runs/ok/checkpoints"/*/DONE >/dev/null 2>&1 || fail "no complete checkpoint"
wait_exit "$ACTOR_PID" 20
[[ "$STATUS" == 0 ]] || fail "the actor did not exit 0 after the learner finished ($STATUS)"
kill -TERM "$BUFFER_PID"
wait_exit "$BUFFER_PID" 20
if grep -E -l "terminate called|Segmentation|flywheel: error:" "$TMP"/ok-*.log; then
  fail "a process of the successful run crashed or reported an error"
fi

# 2. Rank 1 is SIGKILLed mid-run.
start_job kill 1000
METRICS="$TMP/runs/kill/metrics.jsonl"
two_steps() { [[ -f "$METRICS" ]] && (($(wc -l <"$METRICS") >= 2)); }
wait_for 60 two_steps || die "the learner group made no 2 steps"
RANK0=$(ps -o pid=,args= --ppid "$LAUNCH_PID" | awk '/--rank 0/ {print $1}')
RANK1=$(ps -o pid=,args= --ppid "$LAUNCH_PID" | awk '/--rank 1/ {print $1}')
[[ -n "$RANK0" && -n "$RANK1" ]] || die "cannot find the ranks' processes"
kill -9 "$RANK1"
killed_at=$SECONDS
wait_exit "$LAUNCH_PID" 60
elapsed=$((SECONDS - killed_at))
[[ "$STATUS" != running ]] || fail "the launcher still runs 60 s after rank 1 was killed"
[[ "$STATUS" != 0 ]] || fail "the launcher exited 0 after rank 1 was killed"
kill -0 "$RANK0" 2>/dev/null && fail "rank 0 still runs after the launcher exited"
grep -q "rank 1 was killed by signal 9" "$TMP/kill-launch.log" ||
  fail "the launcher does not name rank 1"
rank0_error=$(grep "^\[rank 0\] flywheel: error:" "$TMP/kill-launch.log")
[[ -n "$rank0_error" ]] || fail "rank 0 reported no error (it must exit non-zero)"
grep -q "rank 1 stopped" <<<"$rank0_error" || fail "rank 0's error does not name rank 1: $rank0_error"
echo "rank 1 killed: launcher exit $STATUS after $elapsed s; $rank0_error"
kill -9 "$ACTOR_PID" "$BUFFER_PID" 2>/dev/null

if ((failures > 0)); then
  dump
  echo "$failures failure(s)"
  exit 1
fi
echo "learner_group_test: OK"
