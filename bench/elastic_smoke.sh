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
# Short runs: 2 cells (colocated, async-k1, elastic) on the phased workload alone, with phases
# short enough to change within the run; the steady workload's keys are then null. Whether the
# satellite moves is not checked here (with 2 cells the controller keeps one rollout cell, so it
# cannot move at all): the controller's tests and elastic_job_test check that.
# An instrumented build (scripts/sanitize) runs several times slower: the runs get that much longer.
"$flywheel" bench elastic --quick --param cells=2 --param slowdown=1 --param workloads=phased \
  --param phase_seconds=3 --param wall_s=$((10 * ${FLYWHEEL_TEST_TIME_SCALE:-1})) \
  --param eval_episodes=8 --out "$out"
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
check(report["config"]["workloads"]["phased"]["env.latency.phase_seconds"] == 3,
      "the phased workload's phase_seconds is not the --param")
results = report.get("results", {}).get("phased", {})
sides = ("colocated", "async-k1", "elastic")
for side in sides:
    r = results.get(side)
    check(r is not None, f"results.phased has no {side}")
    if r is None:
        continue
    check(number(r.get("samples_per_s")) and r["samples_per_s"] > 0,
          f"{side}: samples_per_s {r.get('samples_per_s')} not > 0")
    check(number(r.get("final_reward")), f"{side}: no final_reward")
    check(len(r.get("runs", [])) == report["config"]["rounds"], f"{side}: runs != rounds")
    for run in r.get("runs", []):
        check(run.get("final_reward_from") == "eval", f"{side}: final reward not from eval")
for run in results.get("elastic", {}).get("runs", []):
    check(number(run.get("elastic", {}).get("switches")), f"elastic run without switches: {run}")
# The phased workload's figures are numbers; the steady one's (not run) are null.
for key in ("speedup_vs_best_static_phased", "speedup_vs_colocated_phased",
            "samples_per_s_vs_best_static_phased", "samples_per_s_vs_colocated_phased"):
    check(number(report.get(key)), f"no number {key}")
check(report.get("best_static_K_phased") == 1, "best_static_K_phased is not 1 (the only split)")
for key in ("speedup_vs_best_static_steady", "speedup_vs_colocated", "best_static_K_steady"):
    check(key in report and report[key] is None, f"{key} is not null (steady not run)")
check(number(report.get("switches_per_step", {}).get("phased")), "no switches_per_step.phased")
sw = report.get("switch_seconds", {})
for direction in ("to_train", "to_rollout"):
    d = sw.get(direction, {})
    check(number(d.get("p50")) and number(d.get("max")) and
          0 <= d["p50"] <= d["max"] <= report["config"]["wall_s"],
          f"switch_seconds.{direction} {d} not 0 <= p50 <= max <= wall_s")
goals = report.get("goals", {})
check(set(goals) == {"speedup_vs_best_static_steady", "speedup_vs_best_static_phased",
                     "speedup_vs_colocated", "switches_per_step_steady"}, f"goals {goals}")
check(isinstance(goals.get("speedup_vs_best_static_phased"), bool) and
      goals.get("speedup_vs_colocated") is None, f"goals {goals}")
# The simulator's prediction of every side, against the measured order.
o = report.get("sim_ordering", {}).get("phased") or {}
check("not_predicted" not in o, f"phased not predicted: {o.get('not_predicted')}")
check(sorted(o.get("predicted", {}).get("order", [])) == sorted(sides) and
      sorted(o.get("measured", {}).get("order", [])) == sorted(sides),
      f"sim_ordering.phased orders {o}")
agree = o.get("agree", {})
check(len(agree) == 3 and all(isinstance(v, bool) for v in agree.values()),
      f"sim_ordering.phased.agree {agree}")
if errors:
    print("elastic_quick.json is not a sane report:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("elastic report ok")
EOF
