#!/usr/bin/env bash
# Smoke test of `flywheel bench pipeline --quick`: the report has every field the benchmark
# promises, with sane values. No timing targets: those are the full benchmark's business.
set -euo pipefail
flywheel=$1
out=${2:-pipeline_quick.json}
rm -f "$out"
# A bad knob is refused before anything runs, naming the knob.
if "$flywheel" bench pipeline --quick --param samples=many >"$out.err" 2>&1; then
  echo "bench pipeline accepted --param samples=many"; exit 1
fi
grep -q "samples=many" "$out.err" || { echo "error does not name the knob:"; cat "$out.err"; exit 1; }
if "$flywheel" bench pipeline --quick --param in_flight=50 >"$out.err" 2>&1; then
  echo "bench pipeline accepted --param in_flight=50"; exit 1
fi
grep -q "MEDIAN_MS:EPISODES" "$out.err" || { echo "error does not say the form:"; cat "$out.err"; exit 1; }
"$flywheel" bench pipeline --quick --out "$out"
/usr/bin/python3 - "$out" <<'EOF'
import json, math, sys

report = json.load(open(sys.argv[1]))
errors = []

def check(cond, what):
    if not cond:
        errors.append(what)

def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

def check_mode(where, r, samples_budget):
    for key in ("learner_utilization", "samples_per_s", "time_to_target_s", "final_reward",
                "samples_trained", "wall_s", "latency_audit"):
        check(key in r, f"{where}: no {key}")
    if errors:
        return
    check(number(r["learner_utilization"]) and 0 < r["learner_utilization"] <= 1.0 + 1e-6,
          f"{where}: learner_utilization {r['learner_utilization']} not in (0, 1]")
    check(number(r["samples_per_s"]) and r["samples_per_s"] > 0,
          f"{where}: samples_per_s {r['samples_per_s']} not > 0")
    t = r["time_to_target_s"]
    check(t is None or (number(t) and 0 <= t <= r["wall_s"] + 1e-6),
          f"{where}: time_to_target_s {t} neither null nor within the run")
    # guess.toml: 1 for the number plus at most 0.9 for the ruled-out share of the range.
    check(number(r["final_reward"]) and 0 <= r["final_reward"] <= 1.9 + 1e-6,
          f"{where}: final_reward {r['final_reward']} not in [0, 1.9]")
    check(r["samples_trained"] > 0 and r["budget_met"] is True,
          f"{where}: trained {r['samples_trained']} of a budget of {samples_budget}")

check(report.get("bench") == "pipeline", "bench is not pipeline")
config = report.get("config", {})
lat = config.get("latency", {})
check(lat.get("model") == "lognormal" and lat.get("median_ms", 0) >= 50 and
      lat.get("sigma", 0) >= 0.99 and lat.get("p99_over_median", 0) >= 10,
      f"heavy-tail latency not stated or too light: {lat}")
results = report.get("results", {})
for mode in ("async", "colocated"):
    check(mode in results, f"results has no {mode}")
    if mode not in results:
        continue
    # Over seeds: the mean, and every seed's run under per_seed.
    runs = results[mode].get("per_seed", [results[mode]])
    check(len(runs) == config.get("seeds"), f"{mode}: {len(runs)} runs for {config.get('seeds')} seeds")
    for i, run in enumerate(runs):
        check_mode(f"{mode} seed {i}", run, config.get("samples_budget"))
        # The main comparison's final reward is the evaluation of the final policy.
        ev = run.get("eval") or {}
        check(run.get("final_reward_from") == "eval" and
              ev.get("episodes") == config.get("eval_episodes") and
              ev.get("reward_mean") == run["final_reward"],
              f"{mode} seed {i}: final_reward is not the evaluation of "
              f"{config.get('eval_episodes')} episodes: {run.get('final_reward_from')}, {ev}")
    mean = sum(run["final_reward"] for run in runs) / len(runs)
    check(abs(results[mode]["final_reward"] - mean) < 1e-9,
          f"{mode}: final_reward {results[mode]['final_reward']} is not the mean over seeds {mean}")
for key in ("speedup_samples", "speedup_time_to_target", "speedup_by_median"):
    check(key in report, f"no top-level {key}")
check(number(report.get("speedup_samples")) and report["speedup_samples"] > 0,
      f"speedup_samples {report.get('speedup_samples')} not a positive number")
t = report.get("speedup_time_to_target")
check(t is None or (number(t) and t > 0), f"speedup_time_to_target {t} neither null nor > 0")
sweep = results.get("sweep", [])
check(len(sweep) == len(config.get("medians_ms", [])) and len(sweep) >= 2,
      f"sweep has {len(sweep)} points for medians {config.get('medians_ms')}")
for point in sweep:
    where = f"sweep median {point.get('median_ms')}"
    check(number(point.get("speedup_samples")), f"{where}: no speedup_samples")
    check("speedup_time_to_target" in point, f"{where}: no speedup_time_to_target")
    for mode in ("async", "colocated"):
        check(mode in point, f"{where}: no {mode}")
        if mode in point:
            check_mode(f"{where} {mode}", point[mode], point.get("samples_budget"))
    check(str(int(point.get("median_ms", -1))) in report.get("speedup_by_median", {}),
          f"{where}: not in speedup_by_median")
# The colocated peer over-samples: each of its steps started more groups than it trained on
# and dropped the rest.
over = (results.get("colocated", {}).get("per_seed") or [{}])[0].get("oversample") or {}
check(number(config.get("colocated_oversample")) and config["colocated_oversample"] > 0 and
      over.get("fraction") == config["colocated_oversample"],
      f"colocated peer does not over-sample: config {config.get('colocated_oversample')}, {over}")
check(over.get("episodes_cut", 0) + over.get("groups_dropped", 0) +
      over.get("incomplete_dropped", 0) > 0, f"colocated over-sampled but dropped nothing: {over}")
# Sides alternate: the sweep's points do not all run the same mode first.
check(len({point.get("first") for point in sweep}) == 2,
      f"every sweep point ran {sweep[0].get('first') if sweep else None} first")
by_seed = report.get("speedup_samples_by_seed") or []
check(len(by_seed) == config.get("seeds") and number(report.get("speedup_samples_median")) and
      min(by_seed) <= report["speedup_samples_median"] <= max(by_seed),
      f"speedup_samples_median {report.get('speedup_samples_median')} is not the median of "
      f"{by_seed}")
if errors:
    print("pipeline_quick.json is not a sane report:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("pipeline report ok")
EOF
