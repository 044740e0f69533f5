#!/usr/bin/env bash
# Smoke test of `flywheel bench learner-parallel --quick`: the report has every figure the
# benchmark promises, with sane values. No scaling or overlap targets: on a tiny model and one
# round those are noise; the full run is where they are judged.
set -euo pipefail
flywheel=$1
out=${2:-learner_parallel_quick.json}
rm -f "$out"
# A bad mode is refused before anything trains, naming it.
if "$flywheel" bench learner-parallel --quick --param modes=none,zero3 >"$out.err" 2>&1; then
  echo "bench learner-parallel accepted --param modes=none,zero3"; exit 1
fi
grep -q '"zero3"' "$out.err" || { echo "error does not name the mode:"; cat "$out.err"; exit 1; }
"$flywheel" bench learner-parallel --quick --out "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, math, sys

report = json.load(open(sys.argv[1]))
errors = []

def check(cond, what):
    if not cond:
        errors.append(what)

def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

check(report.get("bench") == "learner-parallel", "bench is not learner-parallel")
for key in ("machine", "config", "scaling_2_ranks", "comm_overlap", "scaling_goal_met",
            "comm_overlap_goal_met", "bytes_vs_theory", "scaling_by_size_and_mode"):
    check(key in report, f"no top-level {key}")
check(number(report.get("scaling_2_ranks")) and report["scaling_2_ranks"] > 0,
      f"scaling_2_ranks {report.get('scaling_2_ranks')} not > 0")
check(number(report.get("comm_overlap")) and 0 <= report["comm_overlap"] <= 1 + 1e-9,
      f"comm_overlap {report.get('comm_overlap')} not in [0, 1]")
results = report.get("results", {})
for size in ("guess", "big"):
    sizes = report.get("config", {}).get("sizes", {})
    check(min(sizes.get(size, {}).get("micro_batches_per_step", [0])) >= 4,
          f"{size}: fewer than 4 micro-batches per step")
    for mode in ("none", "grads_optimizer", "full"):
        r = results.get(size, {}).get(mode)
        if r is None:
            errors.append(f"results has no {size}/{mode}")
            continue
        for side in ("1_rank", "2_ranks"):
            check(number(r[side].get("tokens_per_s")) and r[side]["tokens_per_s"] > 0,
                  f"{size}/{mode}/{side}: tokens_per_s not > 0")
        check(r["1_rank"]["comm_bytes_per_step_per_rank"] == 0,
              f"{size}/{mode}: 1 rank sent bytes")
        two = r["2_ranks"]
        # The communicator counts what each collective moves; it must agree with the formula.
        ratio = two.get("comm_bytes_over_theory")
        check(number(ratio) and abs(ratio - 1) < 0.01,
              f"{size}/{mode}: comm bytes / theory = {ratio}, not 1")
        wire = two.get("wire_over_theory")
        check(wire is None or (number(wire) and wire > 0.5),
              f"{size}/{mode}: loopback carried {wire} of the theory")
        if mode == "none":
            check(two.get("comm", {}).get("buckets_per_step", 0) >= 1,
                  f"{size}/none: no all-reduce buckets")
if errors:
    print("learner_parallel_quick.json is not a sane report:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("learner-parallel report ok")
PY
