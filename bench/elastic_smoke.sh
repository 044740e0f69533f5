#!/usr/bin/env bash
# Smoke test of `flywheel bench elastic --quick`: the report has every field the benchmark
# promises, with sane values. No speed targets: those are the full benchmark's business.
set -euo pipefail
flywheel=$1
out=${2:-elastic_quick.json}
rm -f "$out"
# A bad knob is refused before anything runs, naming it.
if "$flywheel" bench elastic --quick --param cells=1 >"$out.err" 2>&1; then
  echo "bench elastic accepted --param cells=1"; exit 1
fi
grep -q "cells=1" "$out.err" || { echo "error does not name the knob:"; cat "$out.err"; exit 1; }
# At the example's token budget (512) the learner keeps up with one rollout cell, so the water
# level never frees the satellite; a larger budget makes a step slower than a batch's
# generation, and the satellite moves to training between batches. 4096 did until guess's short
# rows were attended as one dense matrix (faster steps): one CI run then saw no switch; 8192
# gave 18 and 24 switches in two runs.
# An instrumented build (scripts/sanitize) runs several times slower: the runs get that much longer.
"$flywheel" bench elastic --quick --param wall_s=$((12 * ${FLYWHEEL_TEST_TIME_SCALE:-1})) \
  --param eval_episodes=8 \
  --param token_budget=8192 --out "$out"
/usr/bin/python3 - "$out" <<'EOF'
import json, math, sys

report = json.load(open(sys.argv[1]))
errors = []

def check(cond, what):
    if not cond:
        errors.append(what)

def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

check(report.get("bench") == "elastic", "bench is not elastic")
results = report.get("results", {})
for mode in ("colocated", "elastic", "async-k1"):
    r = results.get(mode)
    check(r is not None, f"results has no {mode}")
    if r is None:
        continue
    check(number(r.get("samples_per_s")) and r["samples_per_s"] > 0,
          f"{mode}: samples_per_s {r.get('samples_per_s')} not > 0")
    check(number(r.get("final_reward")), f"{mode}: no final_reward")
    check(len(r.get("runs", [])) == report["config"]["rounds"], f"{mode}: runs != rounds")
    for run in r.get("runs", []):
        check(run.get("final_reward_from") == "eval", f"{mode}: final reward not from eval")
elastic_runs = results.get("elastic", {}).get("runs", [])
for run in elastic_runs:
    e = run.get("elastic", {})
    check(e.get("switches", 0) >= 1, f"elastic run without a switch: {e}")
for key in ("speedup_vs_colocated", "speedup_vs_static_async", "final_reward_gap"):
    check(number(report.get(key)), f"no number {key}")
sw = report.get("switch_seconds", {})
for direction in ("to_train", "to_rollout"):
    d = sw.get(direction, {})
    check(number(d.get("p50")) and number(d.get("max")) and
          0 <= d["p50"] <= d["max"] <= report["config"]["wall_s"],
          f"switch_seconds.{direction} {d} not 0 <= p50 <= max <= wall_s")
check(isinstance(report.get("goals"), dict) and len(report["goals"]) == 4, "no goals")
if errors:
    print("elastic_quick.json is not a sane report:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("elastic report ok")
EOF
