#!/usr/bin/env bash
# The job as separate processes on 127.0.0.1 with an auth token: `flywheel serve buffer`, one
# `flywheel learner`, two `flywheel actor`s (the second joins late). The late actor must start
# from the newest weights; it is then killed with SIGKILL and the learner must keep stepping
# on the surviving actor's data, whose trajectories must carry weights published after the
# kill. A restarted actor 1 starts from the newest weights and stops on SIGTERM. Every process
# that should end must end cleanly. Also: unreachable addresses and a
# wrong token fail fast with errors that name what to fix.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$(dirname "$0")/process_test_lib.sh"

metrics_lines() { [[ -f "$METRICS" ]] && wc -l <"$METRICS" || echo 0; }
has_lines() { (($(metrics_lines) >= $1)); }
# field KEY: KEY of the last metrics line.
field() { tail -n 1 "$METRICS" | python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
last_version() { field version; }

echo "token-$RANDOM-$RANDOM" >"$TMP/token"
echo "not-the-token" >"$TMP/wrong"
CONFIG="$SOURCE/examples/guess.toml"
SETS=(run.runs_dir="\"$TMP/runs\"" run.name='"dist"' run.max_steps=60 run.max_wall_seconds=$((110 * SCALE))
      run.batch_groups=2 actor.group_size=4 actor.episodes_in_flight=8
      env.latency.model='"constant"' env.latency.mean_ms=1 learner.checkpoint_every=5
      run.trace=true)
METRICS="$TMP/runs/dist/metrics.jsonl"

# Unreachable addresses fail within the connect timeout, naming the address.
err=$("$FLYWHEEL" actor "$CONFIG" --buffer 127.0.0.1:1 --weights 127.0.0.1:1 \
      --connect-timeout 1 2>&1)
[[ $? -ne 0 ]] || fail "an actor with nothing to connect to exited 0"
grep -q "cannot reach the weights service at 127.0.0.1:1" <<<"$err" ||
  fail "unreachable weights service error unclear: $err"
err=$("$FLYWHEEL" learner "$CONFIG" --buffer 127.0.0.1:1 --connect-timeout 1 \
      --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "a learner without a buffer exited 0"
grep -q "cannot reach the buffer at 127.0.0.1:1" <<<"$err" ||
  fail "unreachable buffer error unclear: $err"
[[ ! -e "$TMP/runs/dist" ]] || fail "a learner that never reached its buffer left a run directory"

# stdout and stderr apart: stdout's first line must stay the serving address, with
# --metrics-listen's URL on stderr.
"$FLYWHEEL" --log-level warn serve buffer --config "$CONFIG" --set buffer.group_size=4 buffer.max_size=4 \
  --address 127.0.0.1:0 --auth-token-file "$TMP/token" --metrics-listen :0 \
  >"$TMP/buffer.log" 2>"$TMP/buffer-stderr.log" &
BUFFER_PID=$!
PIDS+=("$BUFFER_PID")
wait_for 20 grep -qs "serving on" "$TMP/buffer.log" || die "the buffer did not start"
BUFFER=$(sed -n 's/.*serving on \([0-9.:]*\) .*/\1/p' "$TMP/buffer.log")
head -n 1 "$TMP/buffer.log" | grep -q "serving on" || fail "the buffer's first stdout line is not its address"
BUFFER_METRICS=$(sed -n 's|.*metrics at http://\([0-9.:]*\)/metrics.*|\1|p' "$TMP/buffer-stderr.log")
[[ -n "$BUFFER_METRICS" ]] || fail "serve buffer --metrics-listen printed no URL"

# A learner whose groups are not the buffer's is refused before it creates its run.
err=$("$FLYWHEEL" learner "$CONFIG" --buffer "$BUFFER" --weights-listen 127.0.0.1:0 \
      --auth-token-file "$TMP/token" --set "${SETS[@]}" actor.group_size=8 2>&1)
[[ $? -ne 0 ]] || fail "a learner with actor.group_size 8 accepted a buffer of groups of 4"
grep -q "releases groups of 4 trajectories but actor.group_size = 8" <<<"$err" ||
  fail "group size mismatch error unclear: $err"

"$FLYWHEEL" --log-level warn learner "$CONFIG" --buffer "$BUFFER" --weights-listen 127.0.0.1:0 \
  --auth-token-file "$TMP/token" --set "${SETS[@]}" >"$TMP/learner.log" 2>&1 &
LEARNER_PID=$!
PIDS+=("$LEARNER_PID")
wait_for 30 grep -qs "serving weights on" "$TMP/learner.log" || die "the learner did not start"
WEIGHTS=$(sed -n 's/.*serving weights on \([0-9.:]*\) .*/\1/p' "$TMP/learner.log")

# A wrong token is refused at once, not retried.
err=$("$FLYWHEEL" actor "$CONFIG" --buffer "$BUFFER" --weights "$WEIGHTS" \
      --auth-token-file "$TMP/wrong" --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "an actor with a wrong token exited 0"
grep -q "auth token does not match" <<<"$err" || fail "wrong token error unclear: $err"

start_actor() {
  "$FLYWHEEL" --log-level warn actor "$CONFIG" --buffer "$BUFFER" --weights "$WEIGHTS" \
    --actor-index "$1" --auth-token-file "$TMP/token" --poll-interval 0.2 \
    --set "${SETS[@]}" >"$TMP/actor$1.log" 2>&1 &
}
start_actor 0
ACTOR0_PID=$!
PIDS+=("$ACTOR0_PID")

wait_for 60 has_lines 3 || die "the learner made no 3 steps with one actor"
# Actor 0 is frozen from here until actor 1 has been killed and restarted: the learner steps only
# on actor 1's data meanwhile, so that it cannot run out its 60 steps while actor 1 starts (a
# process that loads LibTorch and measures its BLAS threads and decoding backends can take half a
# minute to start on a loaded 2-core machine; on one, the learner finished first).
kill -STOP "$ACTOR0_PID"
JOIN_VERSION=$(last_version)
start_actor 1
ACTOR1_PID=$!
PIDS+=("$ACTOR1_PID")
wait_for 60 grep -qs "weights version" "$TMP/actor1.log" || die "the late actor got no weights"
first=$(sed -n 's/.*weights version \([0-9]*\) .*/\1/p' "$TMP/actor1.log" | head -n 1)
((first >= JOIN_VERSION)) ||
  fail "the late actor started from version $first, older than $JOIN_VERSION at its start"

# Let the late actor work through one weight swap, then kill it mid-run.
two_swaps() { (($(grep -c "weights version" "$TMP/actor1.log") >= 2)); }
wait_for 60 two_swaps || fail "the late actor never swapped weights"
kill -9 "$ACTOR1_PID"
wait "$ACTOR1_PID" 2>/dev/null
KILL_LINES=$(metrics_lines)
KILL_VERSION=$(last_version)
echo "killed actor 1 at learner version $KILL_VERSION ($KILL_LINES steps)"

# A restarted actor 1 (same index) starts from the newest weights and stops cleanly on SIGTERM;
# actor 0 is still frozen, so the learner waits for data instead of racing the start-up.
RESTART_VERSION=$(last_version)
mv "$TMP/actor1.log" "$TMP/actor1-killed.log"
start_actor 1
RESTARTED_PID=$!
PIDS+=("$RESTARTED_PID")
wait_for 60 grep -qs "weights version" "$TMP/actor1.log" || fail "the restarted actor got no weights"
first=$(sed -n 's/.*weights version \([0-9]*\) .*/\1/p' "$TMP/actor1.log" | head -n 1)
((first >= RESTART_VERSION)) ||
  fail "the restarted actor started from version $first, older than $RESTART_VERSION"
kill -TERM "$RESTARTED_PID"
wait_exit "$RESTARTED_PID" 20
[[ "$STATUS" == 0 ]] || fail "the restarted actor did not exit 0 on SIGTERM (status $STATUS)"
grep -q "stopped (signal)" "$TMP/actor1.log" || fail "the restarted actor did not say why it stopped"
kill -CONT "$ACTOR0_PID"

wait_exit "$LEARNER_PID" 90
[[ "$STATUS" == 0 ]] || fail "the learner did not exit 0 after the kill (status $STATUS)"
LINES=$(metrics_lines)
((LINES > KILL_LINES)) || fail "no learner step after the kill ($LINES lines)"
[[ $(field step) == 60 ]] || fail "the learner did not reach max_steps"
# Trajectories of the surviving actor, trained on after the kill, carry newer weights.
after=$(tail -n +"$((KILL_LINES + 1))" "$METRICS" | python3 -c "
import json, sys
versions = [v['max_version'] for line in sys.stdin for k, v in json.loads(line)['actors'].items()
            if k.startswith('actor-0@')]
print(max(versions, default=-1))")
((after > KILL_VERSION)) ||
  fail "actor 0's trajectories after the kill carry version $after, not newer than $KILL_VERSION"
swapped=$(sed -n 's/.*weights version \([0-9]*\) .*/\1/p' "$TMP/actor0.log" | tail -n 1)
((swapped > KILL_VERSION)) || fail "actor 0 logged no weights newer than $KILL_VERSION"
[[ -f "$TMP/runs/dist/summary.json" ]] || fail "no summary.json"
# run.trace: the learner process records its own trace into the run directory.
python3 -c "
import json
events = json.load(open('$TMP/runs/dist/trace.json'))['traceEvents']
assert any(e.get('ph') == 'X' and e.get('name') == 'forward' for e in events)" 2>/dev/null ||
  fail "no trace.json with the learner's forward spans in the run directory"
ls "$TMP/runs/dist/checkpoints"/*/DONE >/dev/null 2>&1 || fail "no complete checkpoint"

# The surviving actor sees the run finished and stops cleanly; the buffer stops on SIGTERM.
wait_exit "$ACTOR0_PID" 20
[[ "$STATUS" == 0 ]] || fail "actor 0 did not exit 0 after the learner finished (status $STATUS)"
grep -q "stopped (the learner finished)" "$TMP/actor0.log" || fail "actor 0 did not say why it stopped"
# The buffer process's own metrics: what it inserted and handed out.
inserts=$(curl -sf "http://$BUFFER_METRICS/metrics" | sed -n 's/^flywheel_buffer_inserts_total \([0-9]*\)$/\1/p')
((${inserts:-0} > 0)) || fail "serve buffer's /metrics has no inserts (got '${inserts}')"
kill -TERM "$BUFFER_PID"
wait_exit "$BUFFER_PID" 20
[[ "$STATUS" == 0 ]] || fail "the buffer did not exit 0 on SIGTERM (status $STATUS)"
if grep -E -l "terminate called|Segmentation|Aborted|flywheel: error:" "$TMP"/*.log; then
  fail "a process crashed or reported an error"
fi

if ((failures > 0)); then
  dump
  echo "$failures failure(s)"
  exit 1
fi
grep -q '"actor-1@' "$METRICS" && echo "the learner trained on actor 1's data before it died too"
echo "processes_test: OK ($LINES steps, actor 1 killed at version $KILL_VERSION, actor 0 reached $after)"
