#!/usr/bin/env bash
# flywheel export on the real binary: a short run's checkpoint as a Hugging Face directory; a run
# that starts from one (a tiny Qwen3 in BF16, written by the model tests' script) exports its
# architecture, dtype and tokenizer files again; a [model] shape that contradicts config.json is
# refused naming both values.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

small=(--set run.max_steps=2 --set run.batch_groups=2 --set actor.group_size=4
  --set actor.episodes_in_flight=8 --set env.latency.mean_ms=1 --set learner.checkpoint_every=2
  --set run.runs_dir="$TMP/runs")
out=$("$FLYWHEEL" --log-level warn train "$SOURCE/examples/guess.toml" "${small[@]}" --set run.name=self 2>&1) ||
  fail "the short run to export failed: $out"
out=$("$FLYWHEEL" export "$TMP/runs/self" --out "$TMP/self-hf") || fail "flywheel export failed: $out"
grep -q "(step 2) to $TMP/self-hf: LlamaForCausalLM, .* float32" <<<"$out" || fail "export output unclear: $out"
grep -q '"torch_dtype": "float32"' "$TMP/self-hf/config.json" || fail "exported config lacks torch_dtype"
[[ -s "$TMP/self-hf/model.safetensors" && -s "$TMP/self-hf/generation_config.json" ]] ||
  fail "export lacks model.safetensors or generation_config.json"
err=$("$FLYWHEEL" export "$TMP/runs/self" --out "$TMP/self-hf" 2>&1) && fail "export overwrote a directory"
grep -q "not empty" <<<"$err" || fail "export into a full directory unclear: $err"
/usr/bin/python3 "$SOURCE/src/flywheel/model/testdata/hf_tiny_checkpoints.py" "$TMP/hf" >/dev/null ||
  fail "writing the tiny checkpoints failed"
cat >"$TMP/from-hf.toml" <<TOML
[model]
path = "$TMP/hf/qwen3_tied_bf16"
max_seq_len = 256
[env]
kind = "guess"
[actor]
max_new_tokens = 1
[learner]
buckets = [64, 128, 256]
TOML
out=$("$FLYWHEEL" --log-level warn train "$TMP/from-hf.toml" "${small[@]}" --set run.name=from-hf 2>&1) ||
  fail "a run from model.path failed: $out"
out=$("$FLYWHEEL" export "$TMP/runs/from-hf" --step 2 --out "$TMP/from-hf-out") ||
  fail "export of the model.path run failed: $out"
grep -q "Qwen3ForCausalLM, .* bfloat16" <<<"$out" || fail "model.path export output unclear: $out"
cmp -s "$TMP/hf/qwen3_tied_bf16/tokenizer.json" "$TMP/from-hf-out/tokenizer.json" ||
  fail "export did not copy tokenizer.json"
err=$("$FLYWHEEL" train "$TMP/from-hf.toml" "${small[@]}" --set run.name=bad --set model.hidden_size=64 2>&1) &&
  fail "a [model] shape that disagrees with config.json was accepted"
grep -q "model.hidden_size = 64 in the job config disagrees with hidden_size = 32" <<<"$err" ||
  fail "shape disagreement unclear: $err"

echo "export_test: $failures failures"
exit $((failures > 0))
