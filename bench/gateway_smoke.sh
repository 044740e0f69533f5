#!/usr/bin/env bash
# Smoke test of `flywheel bench gateway --quick` (8 agents × 2 calls, one round): the report has
# every figure the benchmark promises, finite and in range, and both sides did the same work.
# No timing targets: those are the full benchmark's business.
set -euo pipefail
flywheel=$1
out=${2:-gateway_quick.json}
here=$(dirname "$0")
rm -f "$out"
# A bad knob is refused before anything runs, naming the knob.
if "$flywheel" bench gateway --quick --param agents=many >"$out.err" 2>&1; then
  echo "bench gateway accepted --param agents=many"
  exit 1
fi
grep -q "agents=many" "$out.err" || { echo "the error does not name the knob:"; cat "$out.err"; exit 1; }
"$flywheel" bench gateway --quick --out "$out"
/usr/bin/python3 "$here/check_json.py" "$out" bench==gateway \
  direct_tokens_per_s\>0 gateway_tokens_per_s\>0 gateway_overhead\<1 gateway_cpu_ratio\>0 \
  gateway_p50_added_ms:number gateway_p99_added_ms:number \
  tree_vs_flat_time_per_step\>0 tokens_tree\>0 tokens_flat\>0 \
  tokens_saved_ratio\>=0 tokens_saved_ratio\<1 \
  first_calls_identical==true \
  config.agents==8 config.calls_per_agent==2 config.rounds==1 \
  machine.cores machine.torch_threads \
  results.gateway.executions_recorded_last_round==8 \
  results.gateway.calls_recorded_last_round==16 \
  'results.direct.rounds.*.calls==16' 'results.gateway.rounds.*.calls==16' \
  'results.direct.rounds.*.p50_ms>0' 'results.gateway.rounds.*.p99_ms>0' \
  results.learner.executions==8 \
  results.learner.tree_vs_flat_time_per_step~tree_vs_flat_time_per_step@0
echo "gateway report ok"
