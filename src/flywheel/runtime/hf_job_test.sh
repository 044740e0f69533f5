#!/usr/bin/env bash
# `flywheel train examples/guess.toml --set model.path=DIR` on a tiny random Qwen3 directory with
# the real Qwen3 tokenizer and chat template (model/testdata/hf_tiny_chat_model.py): the async
# job runs end to end through the template and writes its metrics; the directory's
# generation_config.json sets the sampling the job config leaves unset. Then the same directory
# with separate processes (serve buffer, learner, actor): the actor process plays through the
# chat template too. (chat_actor_test checks the trainable mask of such episodes token by token.)
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$(dirname "$0")/process_test_lib.sh"

[[ -f "$SOURCE/third_party/tokenizers/qwen3/tokenizer.json" ]] ||
  die "third_party/tokenizers/qwen3 is missing: run scripts/setup, which fetches the Qwen3 tokenizer"
MODEL="$TMP/qwen3-tiny"
/usr/bin/python3 "$SOURCE/src/flywheel/model/testdata/hf_tiny_chat_model.py" "$MODEL" \
  "$SOURCE/third_party/tokenizers/qwen3" || die "writing the tiny Qwen3 directory failed"
CONFIG="$SOURCE/examples/guess.toml"
SETS=(model.path="\"$MODEL\"" run.max_steps=3 run.batch_groups=1 actor.group_size=4
      actor.episodes_in_flight=8 actor.max_new_tokens=4 actor.max_turns=3 env.latency.model='"constant"'
      env.latency.mean_ms=1 sampling.top_k=0 run.runs_dir="\"$TMP/runs\"")

# The embedded async job.
start=$SECONDS
"$FLYWHEEL" train "$CONFIG" --set "${SETS[@]}" run.name='"embedded"' >"$TMP/embedded.log" 2>&1 ||
  die "flywheel train with model.path failed"
echo "embedded job: $((SECONDS - start)) s"
grep -q "policy text: $MODEL/tokenizer.json (vocabulary 151669), its chat template, stop tokens <|im_end|> (151645), <|endoftext|> (151643)" \
  "$TMP/embedded.log" || fail "the job did not use the directory's tokenizer and chat template"
# generation_config.json fills temperature and top_p; --set sampling.top_k=0 wins over its 20.
grep -q "generation_config.json: sampling.temperature = 0.6, sampling.top_p = 0.95$" \
  "$TMP/embedded.log" || fail "generation_config.json's sampling defaults were not applied as expected"
grep -q '^temperature = 0.6 ' "$TMP/runs/embedded/config.toml" &&
  grep -q '^top_k = 0 ' "$TMP/runs/embedded/config.toml" ||
  fail "the run's config.toml does not hold the resolved sampling"
lines=$(wc -l <"$TMP/runs/embedded/metrics.jsonl" 2>/dev/null || echo 0)
((lines == 3)) || fail "metrics.jsonl has $lines lines, expected one per step (3)"
python3 - "$TMP/runs/embedded/metrics.jsonl" <<'PY' || fail "metrics.jsonl lacks the trained tokens"
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
assert [s["step"] for s in steps] == [1, 2, 3], steps
assert all(s["trainable_tokens"] > 0 for s in steps), steps
PY

# Separate processes: the actor resolves its tokenizer and turn format as the embedded job does.
"$FLYWHEEL" --log-level warn serve buffer --config "$CONFIG" --set buffer.group_size=4 \
  buffer.max_size=4 --address 127.0.0.1:0 >"$TMP/buffer.log" 2>&1 &
PIDS+=($!)
wait_for 20 grep -qs "serving on" "$TMP/buffer.log" || die "the buffer did not start"
BUFFER=$(sed -n 's/.*serving on \([0-9.:]*\) .*/\1/p' "$TMP/buffer.log")
"$FLYWHEEL" learner "$CONFIG" --buffer "$BUFFER" --weights-listen 127.0.0.1:0 \
  --set "${SETS[@]}" run.name='"processes"' >"$TMP/learner.log" 2>&1 &
LEARNER_PID=$!
PIDS+=("$LEARNER_PID")
wait_for 60 grep -qs "serving weights on" "$TMP/learner.log" || die "the learner did not start"
WEIGHTS=$(sed -n 's/.*serving weights on \([0-9.:]*\) .*/\1/p' "$TMP/learner.log")
"$FLYWHEEL" actor "$CONFIG" --buffer "$BUFFER" --weights "$WEIGHTS" --poll-interval 0.2 \
  --set "${SETS[@]}" run.name='"processes"' >"$TMP/actor.log" 2>&1 &
PIDS+=($!)
wait_exit "$LEARNER_PID" 120
[[ "$STATUS" == 0 ]] || die "the learner of the separate processes ended with $STATUS"
grep -q "policy text: $MODEL/tokenizer.json (vocabulary 151669), its chat template" "$TMP/actor.log" ||
  fail "the actor process did not use the directory's tokenizer and chat template"
lines=$(wc -l <"$TMP/runs/processes/metrics.jsonl" 2>/dev/null || echo 0)
((lines == 3)) || fail "the learner process wrote $lines metrics lines, expected 3"

((failures == 0)) || dump
echo "hf_job_test: $failures failures"
exit $((failures > 0))
