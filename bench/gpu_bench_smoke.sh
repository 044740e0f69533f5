#!/usr/bin/env bash
# Smoke test of the GPU arms of `flywheel bench rollout-gpu` and `flywheel bench learner` on the
# CPU: what the GPU machine will run, minus the GPU. Checks the reports' fields and values:
#   1. as it is: the transformers peer runs, or (no transformers here) is reported as skipped
#      with the reason;
#   2. with the peer's protocol stand-in (--param hf=fake, no model): the C++ side drives the
#      Python process round by round and fills every per-batch field and ratio.
#   3. `flywheel bench learner --quick --param dtype=bfloat16`: the learner under autocast with
#      the device_mfu fields (on the CPU against its float32 matmul) and its Python peer
#      (python3-torch, which scripts/setup installs: a peer that does not run fails the test).
# transformers has no Debian package (scripts/setup installs from Debian's and npm's registries
# only), so on the CPU the rollout bench's Hugging Face peer is skipped with its reason in 1.;
# 2. checks everything around it with the stand-in.
# No speed targets: a tiny model on the CPU says nothing about a GPU.
set -euo pipefail
flywheel=$1
out=${2:-rollout_gpu_quick.json}
here=$(cd "$(dirname "$0")" && pwd)
check=(/usr/bin/python3 "$here/check_json.py")
tiny=(--quick --param device=cpu --param dtype=float32 --param model=tiny)

# A device this build cannot use is refused, naming the way to run on the CPU.
if [[ $("$flywheel" bench rollout-gpu --quick --param model=tiny --param device=cuda:4096 2>&1) \
  != *"device=cpu"* ]]; then
  echo "rollout-gpu on cuda:4096 did not fail naming --param device=cpu"; exit 1
fi

rm -f "$out"
"$flywheel" bench rollout-gpu "${tiny[@]}" --out "$out"
"${check[@]}" "$out" bench==rollout-gpu config.model.name==tiny config.device==cpu \
  'config.model.parameters>0' 'results.batch_2.engine.tokens_per_s>0' \
  'results.batch_4.engine.tokens_per_s>0' 'engine_tokens_per_s.*>0' \
  'results.hf_generate.skipped|speedup_vs_hf_generate.*>0' \
  'results.hf_generate.skipped|greedy_agreement_first_k.prefix_fraction>=0'

"$flywheel" bench rollout-gpu "${tiny[@]}" --param hf=fake --param rounds=2 --out "$out"
"${check[@]}" "$out" config.hf==fake 'speedup_vs_hf_generate.2>0' 'speedup_vs_hf_generate.4>0' \
  'min_speedup_vs_hf_generate>0' 'hf_tokens_per_s.*>0' \
  'results.batch_4.hf_generate.tokens_per_s>0' 'results.batch_4.hf_generate.warmup_seconds>=0' \
  'results.batch_4.greedy_agreement.prefix_fraction>=0' \
  'results.batch_4.greedy_agreement.tokens==8' 'greedy_agreement_first_k.first_token_fraction>=0' \
  'results.hf_peer.peer'
if [[ $(/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; \
print(len(r['batch_2']['hf_generate']['seconds_per_round']))" "$out") != 2 ]]; then
  echo "the fake peer did not answer both rounds"; exit 1
fi

# The learner's GPU arm on the CPU: bfloat16 autocast, the device MFU fields, its one Python peer
# (the per-document loop under CPU autocast; SDPA is the CUDA one's) agreeing to bfloat16's
# precision, and the profile reported as unavailable where LibTorch has no Kineto (Debian's).
"$flywheel" bench learner --quick --param dtype=bfloat16 --param profile=trace.json --out "$out"
"${check[@]}" "$out" config.dtype==bfloat16 \
  'ratio_vs_python>0' 'agreement.documents.ok==true' \
  'results.python.dtype==bfloat16' 'results.flywheel.profile' 'mfu>0' \
  'device_mfu.mfu>0' 'device_mfu.mfu_with_attention>0' 'device_mfu.attention_tflops_per_s>0' 'device_mfu.peak_tflops>0' \
  'device_mfu.measured_matmul_tflops>0' 'device_mfu.mfu_vs_spec>0' device_mfu.peak_source==measured
echo "gpu bench smoke: ok"
