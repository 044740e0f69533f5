#!/usr/bin/env bash
# `flywheel chaos` on the guess job (small batches, as processes_test.sh runs it) for a few
# minutes: at least 20 SIGKILLs over the buffer, the learner and the actors, with freezes and
# network faults between them. Nothing acknowledged may be lost, nothing trained twice, every
# restarted process must be back at work within the bound, and the final checkpoint must load.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$SOURCE/src/flywheel/runtime/process_test_lib.sh"

CONFIG="$SOURCE/examples/guess.toml"
SETS=(run.batch_groups=2 actor.group_size=4 actor.episodes_in_flight=8
      env.latency.model='"constant"' env.latency.mean_ms=1 learner.checkpoint_every=5
      buffer.max_size=8)
# An instrumented build (scripts/sanitize) runs several times slower: the run, its quiet tail and
# the recovery bound are multiplied by SCALE (process_test_lib.sh), the gap between faults is not.
MINUTES=$(awk -v m="${CHAOS_MINUTES:-2.5}" -v s="$SCALE" 'BEGIN { print m * s }')
# Its own process group, so that a timeout of this test takes the job's processes with it.
setsid "$FLYWHEEL" chaos "$CONFIG" --minutes "$MINUTES" --seed "${CHAOS_SEED:-7}" \
  --mean-gap 2.5 --quiet-tail $((20 * SCALE)) --recovery-bound $((60 * SCALE)) \
  --work-dir "$TMP/work" --out "$TMP/chaos.json" \
  --set "${SETS[@]}" >"$TMP/chaos.log" 2>&1 &
CHAOS=$!
PIDS+=("$CHAOS")
trap 'kill -9 -- -"$CHAOS" 2>/dev/null; cleanup' EXIT
wait "$CHAOS"
STATUS=$?
cat "$TMP/chaos.log"
[[ -f "$TMP/chaos.json" ]] || die "flywheel chaos wrote no report (status $STATUS)"

python3 - "$TMP/chaos.json" <<'PY' || failures=$((failures + 1))
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
kills = r["kills"]
kinds = [k for k in ("buffer", "learner", "actor") if kills.get(k, 0) > 0]
if kills["total"] < 20:
    problems.append(f"only {kills['total']} kills (want >= 20)")
if len(kinds) < 3:
    problems.append(f"kills hit only {kinds} (want the buffer, the learner and the actors)")
if r["lost"] != 0:
    problems.append(f"{r['lost']} acknowledged trajectories lost: {r['ledger']['lost_examples']}")
if r["duplicates"] != 0:
    problems.append(f"{r['duplicates']} trained twice: {r['ledger']['duplicate_examples']}")
if r["ledger"]["problems"]:
    problems.append(f"history: {r['ledger']['problems']}")
if r["ledger"]["trained_still_in_buffer"]:
    problems.append(f"{r['ledger']['trained_still_in_buffer']} trained but still in the buffer")
rec = r["recovery_seconds"]
if rec["max"] > rec["bound"] or rec["unrecovered"]:
    problems.append(f"recovery: max {rec['max']:.1f} s (bound {rec['bound']} s), "
                    f"{rec['unrecovered']} never recovered")
if not r["final_checkpoint"]["loads"]:
    problems.append(f"the final checkpoint does not load: {r['final_checkpoint']}")
if r["unexpected_exits"]:
    problems.append(f"processes exited by themselves: {r['unexpected_exits']}")
if r["acked"] < 100 or r["trained"] < 100:
    problems.append(f"too little work to prove anything: {r['acked']} acked, {r['trained']} trained")
if not r["ok"] and not problems:
    problems.append("the report says not ok")
for p in problems:
    print("FAIL:", p)
print(f"chaos: {kills} kills, {r['stops']} freezes, {r['proxy_faults']['total']} proxy faults; "
      f"{r['acked']} acked, {r['trained']} trained, {r['rolled_back']} rolled back, "
      f"{r['remaining']} remaining; recovery p50 {rec['p50']:.1f} s, max {rec['max']:.1f} s")
sys.exit(1 if problems else 0)
PY
((STATUS == 0)) || fail "flywheel chaos exited $STATUS"

if ((failures > 0)); then
  for f in "$TMP"/work/logs/*.err; do
    [[ -s "$f" ]] && { echo "--- $f"; tail -n 5 "$f"; }
  done
  echo "$failures failure(s)"
  exit 1
fi
echo "chaos_test: OK"
