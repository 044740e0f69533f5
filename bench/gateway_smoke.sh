#!/usr/bin/env bash
# Smoke test of `flywheel bench gateway --quick`: the report has every figure the benchmark
# promises, finite and in range. No timing targets: those are the full benchmark's business.
set -euo pipefail
flywheel=$1
out=${2:-gateway_quick.json}
rm -f "$out"
# A bad knob is refused before anything runs, naming the knob.
if "$flywheel" bench gateway --quick --param agents=many >"$out.err" 2>&1; then
  echo "bench gateway accepted --param agents=many"; exit 1
fi
grep -q "agents=many" "$out.err" ||
  { echo "error does not name the knob:"; cat "$out.err"; exit 1; }
"$flywheel" bench gateway --quick --out "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, math, sys

report = json.load(open(sys.argv[1]))
errors = []

def check(cond, what):
    if not cond:
        errors.append(what)

def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

check(report.get("bench") == "gateway", "bench is not gateway")
for key in ("direct_tokens_per_s", "gateway_tokens_per_s", "gateway_overhead",
            "gateway_p50_added_ms", "gateway_p99_added_ms", "gateway_cpu_ratio",
            "tree_vs_flat_time_per_step", "tokens_tree", "tokens_flat", "tokens_saved_ratio"):
    check(number(report.get(key)), f"{key} is {report.get(key)!r}, not a finite number")
if not errors:
    for key in ("direct_tokens_per_s", "gateway_tokens_per_s", "gateway_cpu_ratio",
                "tree_vs_flat_time_per_step", "tokens_tree"):
        check(report[key] > 0, f"{key} {report[key]} not > 0")
    check(report["gateway_overhead"] < 1, f"gateway_overhead {report['gateway_overhead']} not < 1")
    check(report["tokens_flat"] >= report["tokens_tree"],
          f"tokens_flat {report['tokens_flat']} < tokens_tree {report['tokens_tree']}")
    check(0 <= report["tokens_saved_ratio"] < 1,
          f"tokens_saved_ratio {report['tokens_saved_ratio']} not in [0, 1)")
# Both sides ran the same work: a first call is the same prompt, seed and weights on both.
check(report.get("first_calls_identical") is True, "the sides' first calls generated other text")
config, results = report.get("config", {}), report.get("results", {})
for key in ("agents", "calls_per_agent", "max_tokens", "rounds", "model", "engine", "threads"):
    check(key in config, f"config has no {key}")
for key in ("cores", "torch_threads", "torch_version"):
    check(key in report.get("machine", {}), f"machine has no {key}")
gateway = results.get("gateway", {})
agents, calls = config.get("agents"), config.get("calls_per_agent")
check(gateway.get("executions_recorded_last_round") == agents,
      f"{gateway.get('executions_recorded_last_round')} executions recorded for {agents} agents")
check(gateway.get("calls_recorded_last_round") == agents * calls,
      f"{gateway.get('calls_recorded_last_round')} calls recorded for {agents} x {calls}")
for side in ("direct", "gateway"):
    rounds = results.get(side, {}).get("rounds", [])
    check(len(rounds) == config.get("rounds"), f"{side}: {len(rounds)} rounds")
    for r in rounds:
        check(r.get("calls") == agents * calls, f"{side}: {r.get('calls')} call latencies")
        check(number(r.get("p99_ms")) and r["p99_ms"] >= r.get("p50_ms", 0) > 0,
              f"{side}: p50 {r.get('p50_ms')} / p99 {r.get('p99_ms')}")
learner = results.get("learner", {})
check(learner.get("tree_vs_flat_time_per_step") == report.get("tree_vs_flat_time_per_step"),
      "learner.tree_vs_flat_time_per_step differs from the top-level figure")
check(learner.get("executions") == agents, f"learner trained on {learner.get('executions')}")
if errors:
    print(sys.argv[1] + " is not a sane report:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("gateway report ok")
PY
