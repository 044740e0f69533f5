#!/usr/bin/env bash
# flywheel report and the live view, on the real binary: three short runs (async, colocated,
# elastic), the report opened in headless Chromium (no script errors, every chart drawn with
# data, a screenshot kept as BUILD_DIR/report_screenshot.png), /data.json and / fetched from
# `train --dashboard-listen` while it runs, and the errors for bad input.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
BUILD="$3"
TMP=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[[ -n "$CHROMIUM" ]] || { echo "FAIL: chromium not found: run scripts/setup"; exit 1; }
start=$SECONDS
SCALE=${FLYWHEEL_TEST_TIME_SCALE:-1}  # an instrumented build runs several times slower

train() {  # NAME CONFIG [--set …]: a short run into $TMP/runs/NAME
  local name=$1 config=$2
  shift 2
  "$FLYWHEEL" train "$SOURCE/examples/$config" --set run.runs_dir="\"$TMP/runs\"" \
    --set run.name="\"$name\"" --set run.max_wall_seconds=$((6 * SCALE)) "$@"
}

# The async run serves its live view; the three runs share the cores, so they run at once.
train async guess.toml --set run.max_steps=25 --dashboard-listen 127.0.0.1:0 >"$TMP/async.out" 2>&1 &
pids+=($!)
train colocated guess.toml --set run.max_steps=15 --set run.mode='"colocated"' >"$TMP/colocated.out" 2>&1 &
pids+=($!)
train elastic copy.toml --set run.mode='"elastic"' --set learner.max_staleness=1 \
  --set scheduler.cells=3 --set run.emulated_slowdown=2 >"$TMP/elastic.out" 2>&1 &
pids+=($!)

url=""
for _ in $(seq $((100 * SCALE))); do
  url=$(sed -n 's|^flywheel: dashboard of .* on \(http://[^ ]*\)$|\1|p' "$TMP/async.out")
  [[ -n "$url" ]] && break
  sleep 0.1
done
if [[ -z "$url" ]]; then
  fail "train --dashboard-listen printed no URL: $(cat "$TMP/async.out")"
else
  live=""
  for _ in $(seq $((60 * SCALE))); do  # until the run has written a step
    live=$(curl -sf "${url}data.json") || true
    grep -q '"reward_mean"' <<<"$live" && break
    sleep 0.2
  done
  grep -q '"reward_mean"' <<<"$live" || fail "live /data.json has no metrics: ${live:0:300}"
  page=$(curl -sf "$url") || fail "live / failed"
  grep -q '"live":{"path":"data.json"' <<<"$page" || fail "live / is not the live page: ${page:0:300}"
  grep -q 'uPlot' <<<"$page" || fail "live / does not inline uPlot"
fi
for p in "${pids[@]}"; do wait "$p" || fail "a training run failed: $(tail -3 "$TMP"/*.out)"; done
pids=()
echo "runs done after $((SECONDS - start)) s"

out=$("$FLYWHEEL" report "$TMP/runs/async" "$TMP/runs/colocated" "$TMP/runs/elastic" \
  --out "$TMP/report.html") || fail "report failed: $out"
grep -q "3 run(s)" <<<"$out" || fail "report did not say it drew 3 runs: $out"
echo "$out"
grep -q '<script src\|<link ' "$TMP/report.html" && fail "the report loads something from outside"

# Chromium writes its profile under HOME.
export HOME="$TMP/home"
mkdir -p "$HOME"
chrome=("$CHROMIUM" --headless=new --no-sandbox --disable-gpu --hide-scrollbars
        --virtual-time-budget=5000 --window-size=1400,2700)
"${chrome[@]}" --dump-dom "file://$TMP/report.html" >"$TMP/dom.html" 2>"$TMP/chromium.err" ||
  fail "chromium --dump-dom failed: $(tail -3 "$TMP/chromium.err")"
status=$(grep -o '<div id="report-status"[^>]*>[^<]*' "$TMP/dom.html")
echo "page: $status"
charts=$(sed -n 's/.*data-charts="\([0-9]*\)".*/\1/p' <<<"$status")
nonempty=$(sed -n 's/.*data-nonempty="\([0-9]*\)".*/\1/p' <<<"$status")
nodata=$(sed -n 's/.*data-nodata="\([0-9]*\)".*/\1/p' <<<"$status")
errors=$(sed -n 's/.*data-errors="\([0-9]*\)".*/\1/p' <<<"$status")
[[ "$errors" == "0" ]] || fail "the page recorded script errors: $status"
# 10 charts of the runs and the roles of the elastic run's cells
[[ "${charts:-0}" -ge 11 ]] || fail "the page drew ${charts:-no} charts, expected 11: $status"
[[ "$nonempty" == "$charts" ]] || fail "charts without data: $status"
[[ "$nodata" == "0" ]] || fail "panels saying 'no data' for runs that have it: $status"
[[ $(grep -o '<canvas' "$TMP/dom.html" | wc -l) == "${charts:-x}" ]] || fail "not one canvas per chart"

"${chrome[@]}" --screenshot="$TMP/report.png" "file://$TMP/report.html" >/dev/null 2>&1 ||
  fail "chromium --screenshot failed"
if [[ -s "$TMP/report.png" ]]; then
  cp "$TMP/report.png" "$BUILD/report_screenshot.png"
  echo "screenshot: $BUILD/report_screenshot.png"
else
  fail "no screenshot"
fi

# Bad input names what to fix.
err=$("$FLYWHEEL" report "$TMP/runs/nope" --out "$TMP/x.html" 2>&1) && fail "a missing run dir was accepted"
grep -q "runs/nope: no such run directory" <<<"$err" || fail "missing dir error unclear: $err"
mkdir -p "$TMP/runs/bad"
printf '{"step":1}\n{"step":2,\n{"step":3}\n' >"$TMP/runs/bad/metrics.jsonl"
err=$("$FLYWHEEL" report "$TMP/runs/bad" --out "$TMP/x.html" 2>&1) && fail "a malformed line was accepted"
grep -q "bad/metrics.jsonl:2: not a JSON object" <<<"$err" || fail "malformed line error unclear: $err"
[[ -e "$TMP/x.html" ]] && fail "a failed report wrote its file"

echo "report_test: $((SECONDS - start)) s"
if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "all report checks passed"
