#!/usr/bin/env bash
# hf_logits_check on the CPU: the six tiny checkpoints of hf_tiny_checkpoints.py against their
# float64 references, in float32 (within 1e-4, as hf_model_test) and bfloat16 (within 2% of the
# largest logit), and a tolerance it must fail (a check that cannot fail proves nothing).
#   hf_logits_test.sh HF_LOGITS_CHECK TESTDATA_DIR
set -euo pipefail
check=$1
testdata=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
/usr/bin/python3 "$testdata/hf_tiny_checkpoints.py" "$dir" > /dev/null
models=()
for ref in "$dir"/*.reference.json; do models+=("${ref%.reference.json}"); done
[[ ${#models[@]} -eq 6 ]] || { echo "expected 6 checkpoints, found ${#models[@]}"; exit 1; }

"$check" --dtype float32 --tolerance 1e-4 "${models[@]}"
"$check" --dtype bfloat16 --tolerance 0.02 --relative "${models[@]}" | tee "$dir/bf16.jsonl"
# bfloat16 really is lower precision: every error above float32's bound.
if grep -q '"packed_max_error":[0-9.e-]*e-0[5-9]' "$dir/bf16.jsonl"; then
  echo "a bfloat16 error is as small as float32's: was the forward lowered?"; exit 1
fi
if "$check" --dtype bfloat16 --tolerance 1e-6 "${models[0]}" > /dev/null; then
  echo "a 1e-6 tolerance in bfloat16 passed"; exit 1
fi
if "$check" --device cuda:x "${models[0]}" 2> "$dir/err"; then
  echo "a bad device was accepted"; exit 1
fi
grep -q 'model.device = "cuda:x"' "$dir/err"
echo "hf_logits_test: OK"
