#!/usr/bin/env bash
# Smoke test of `flywheel bench sim --quick`: the report has every figure the benchmark promises,
# with sane values, and a bad knob is refused naming it. No speed targets: those are the full
# benchmark's business (a loaded CI machine is not this one).
set -euo pipefail
flywheel=$1
out=${2:-sim_quick.json}
rm -f "$out"
if "$flywheel" bench sim --quick --param devices=1 >"$out.err" 2>&1; then
  echo "bench sim accepted --param devices=1"; exit 1
fi
grep -q "devices=1" "$out.err" || { echo "error does not name the knob:"; cat "$out.err"; exit 1; }
"$flywheel" bench sim --quick --out "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, math, sys

report = json.load(open(sys.argv[1]))
errors = []

def check(cond, what):
    if not cond:
        errors.append(what)

def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

check(report.get("bench") == "sim", "bench is not sim")
check(number(report.get("events_per_s")) and report["events_per_s"] > 0, "no events_per_s > 0")
results = report.get("results", {})
check(results.get("throughput", {}).get("episodes_sampled", 0) > 0, "throughput run trained nothing")
tunix = report.get("tunix_learner_utilisation", {})
for side in ("sync", "decoupled"):
    check(number(tunix.get(side)) and 0 <= tunix[side] <= 1, f"tunix {side} utilisation {tunix.get(side)}")
check(tunix.get("sync", 1) < tunix.get("decoupled", 0), "decoupling does not raise utilisation")
for key in ("elastic_vs_best_static_steady", "elastic_vs_best_static_phased",
            "elastic_vs_half_split", "elastic_vs_colocated", "switches_per_step_steady",
            "long_horizon_vs_best_static", "long_horizon_vs_colocated"):
    check(number(report.get(key)) and report[key] >= 0, f"no {key}")
check(report.get("colocated_max_staleness") == 0, "colocated is not said to run at eta = 0")
for key in ("best_static_K_steady", "best_static_K_phased"):
    check(isinstance(report.get(key), list) and report[key], f"no {key}")
for seed, sweeps in results.get("elastic", {}).items():
    for workload in ("steady", "phased"):
        sweep = sweeps.get(workload, {})
        static = sweep.get("static", {})
        check(len(static) == 31, f"seed {seed} {workload}: {len(static)} static splits, not every K")
        check(sweep.get("elastic", {}).get("trained_samples_per_s", 0) > 0,
              f"seed {seed} {workload}: elastic trained nothing")
        best = min(static.values(), key=lambda r: r["sim_hours"]) if static else None
        check(best is not None and str(sweep.get("best_static_K")) in static and
              static[str(sweep["best_static_K"])]["sim_hours"] == best["sim_hours"],
              f"seed {seed} {workload}: best_static_K is not the fastest split")
check(results.get("elastic_long_horizon", {}).get("elastic", {}).get("trained_samples_per_s", 0) > 0,
      "long horizon: elastic trained nothing")
published = report.get("published", {})
check(published.get("elastic_vs_colocated") == [1.21, 1.85] and published.get("source"),
      "published ratio or its source missing")
sw = report.get("switch_seconds", {})
check(number(sw.get("to_train")) and number(sw.get("to_rollout")), "no switch_seconds")
if errors:
    print(sys.argv[1] + " is not a sane report:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("sim report ok")
PY

# The validation against real runs, at its smallest: one case, 3 steps per mode, 2 rounds. Checks
# that every figure of every mode is reported with a finite prediction_error, not how large it is.
"$flywheel" bench sim --quick --param validate=on --param validate_cases=guess \
  --param validate_steps=3 --param validate_rounds=2 --param calibration_episodes=32 --out "$out.validation" >/dev/null 2>&1 ||
  { echo "bench sim with validation failed"; exit 1; }
/usr/bin/python3 - "$out.validation" <<'PY'
import json, math, sys

report = json.load(open(sys.argv[1]))
v = report.get("prediction_error", {})
errors = []
if not isinstance(v, dict) or v.get("figures") != 9:
    errors.append(f"prediction_error does not cover 3 modes x 3 figures: {v}")
for mode in ("colocated", "async", "elastic"):
    e = v.get("by_case", {}).get("guess", {}).get(mode, {})
    for key in ("learner_utilization", "trained_samples_per_s", "staleness_total_variation"):
        x = e.get(key)
        if not (isinstance(x, (int, float)) and math.isfinite(x) and x >= 0):
            errors.append(f"guess/{mode}: no prediction_error.{key} ({x})")
    rounds = report["results"]["validation"]["guess"][mode]["rounds"]
    if len(rounds) != 2:
        errors.append(f"guess/{mode}: {len(rounds)} rounds, not 2")
    for r in rounds:
        if r["real"].get("steps") != 3:
            errors.append(f"guess/{mode}: a real run made {r['real'].get('steps')} steps, not 3")
if errors:
    print("validation report:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("validation report ok")
PY
