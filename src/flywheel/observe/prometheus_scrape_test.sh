#!/usr/bin/env bash
# A real Prometheus (Debian's, on a free loopback port with a temporary config) scrapes a running
# `flywheel train --metrics-listen`; `promtool check metrics` lints what the endpoint serves; the
# query API must return the series a user would graph, with values that agree with the run's own
# records: flywheel_learner_steps_total equal to metrics.jsonl's last step within 1.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$(dirname "$0")/../runtime/process_test_lib.sh"
for tool in prometheus promtool curl python3; do
  command -v "$tool" >/dev/null || die "$tool is not installed (scripts/setup installs it)"
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A bad address is refused naming the flag.
err=$("$FLYWHEEL" train "$SOURCE/examples/guess.toml" --metrics-listen nowhere 2>&1)
[[ $? -ne 0 ]] || fail "--metrics-listen nowhere exited 0"
grep -q -- "--metrics-listen 'nowhere': no port" <<<"$err" || fail "bad address error unclear: $err"

# Steps of a few tenths of a second (batches of 32 groups), so that the last scrape before the
# run is frozen is at most one step behind it.
"$FLYWHEEL" --log-level warn train "$SOURCE/examples/guess.toml" --metrics-listen 127.0.0.1:0 \
  --set run.runs_dir="\"$TMP/runs\"" run.name='"scraped"' run.max_wall_seconds=$((60 * SCALE)) \
  run.batch_groups=32 >"$TMP/train.log" 2>&1 &
TRAIN=$!
PIDS+=("$TRAIN")
wait_for 30 grep -qs "metrics at http://" "$TMP/train.log" || die "train did not serve metrics"
TARGET=$(sed -n 's|.*metrics at http://\([0-9.:]*\)/metrics.*|\1|p' "$TMP/train.log")
METRICS="$TMP/runs/scraped/metrics.jsonl"

# The exposition lints clean once the job has recorded some of everything.
has_steps() { [[ -s "$METRICS" ]] && (($(wc -l <"$METRICS") >= 3)); }
wait_for 40 has_steps || die "the run made no 3 steps"
curl -sf "http://$TARGET/metrics" >"$TMP/exposition.txt" || die "GET /metrics failed"
if ! promtool check metrics <"$TMP/exposition.txt" >"$TMP/promtool.log" 2>&1; then
  fail "promtool check metrics: $(cat "$TMP/promtool.log")"
fi
for series in flywheel_learner_steps_total flywheel_buffer_inserts_total \
  flywheel_actor_generated_tokens_total 'flywheel_env_step_seconds_bucket{le="+Inf"}' \
  'flywheel_actor_episodes_total{termination="done"}' flywheel_buffer_size \
  'flywheel_learner_step_phase_seconds_count{phase="forward"}' flywheel_learner_version; do
  grep -qF "$series " "$TMP/exposition.txt" || fail "the exposition has no $series"
done

PORT=$(free_port)
cat >"$TMP/prometheus.yml" <<YAML
global:
  scrape_interval: 100ms
  scrape_timeout: 90ms
scrape_configs:
  - job_name: flywheel
    static_configs:
      - targets: ["$TARGET"]
YAML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PORT" >"$TMP/prometheus.log" 2>&1 &
PROMETHEUS=$!
PIDS+=("$PROMETHEUS")
API="http://127.0.0.1:$PORT/api/v1/query"
# query EXPR: the first sample's value, or empty.
query() {
  curl -sf --data-urlencode "query=$1" "$API" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")' 2>/dev/null
}
up() { [[ "$(query 'up{job="flywheel"}')" == "1" ]]; }
wait_for 30 up || die "Prometheus never scraped the job (up != 1)"
sleep 2  # some scrapes while the run goes on

# Freeze the run: its last step line and the last successful scrape then stay put. Scrapes of
# a frozen process time out, so the last scraped value is read over a window.
kill -STOP "$TRAIN"
sleep 1
last_step=$(tail -n 1 "$METRICS" | python3 -c 'import json, sys; print(json.load(sys.stdin)["step"])')
scraped=$(query 'last_over_time(flywheel_learner_steps_total[1m])')
[[ -n "$scraped" ]] || fail "no flywheel_learner_steps_total in Prometheus"
if [[ -n "$scraped" ]]; then
  python3 -c "import sys; sys.exit(abs(float('$scraped') - $last_step) > 1)" ||
    fail "flywheel_learner_steps_total $scraped, metrics.jsonl's last step $last_step"
fi
check() {  # check EXPR PYTHON-CONDITION-ON-v
  local v
  v=$(query "$1")
  [[ -n "$v" ]] || {
    fail "no result for $1"
    return
  }
  python3 -c "import sys; v = float('$v'); sys.exit(not ($2))" || fail "$1 = $v, expected $2"
}
check 'last_over_time(flywheel_buffer_inserts_total[1m])' 'v > 0'
check 'last_over_time(flywheel_learner_trained_tokens_total[1m])' 'v > 0'
check 'last_over_time(flywheel_learner_version[1m])' "v >= $last_step - 1"
check 'sum(last_over_time(flywheel_actor_episodes_total[1m]))' 'v > 0'
check 'last_over_time(flywheel_env_step_seconds_count[1m])' 'v > 0'
check 'histogram_quantile(0.5, max_over_time(flywheel_env_step_seconds_bucket[1m]))' '0 < v < 10'
check 'last_over_time(flywheel_learner_utilisation[1m])' '0 < v <= 1'
kill -CONT "$TRAIN"
kill -TERM "$TRAIN"
wait "$TRAIN"
status=$?
((status == 0)) || fail "train did not exit 0 on SIGTERM (status $status)"
kill -TERM "$PROMETHEUS"
wait "$PROMETHEUS" 2>/dev/null

if ((failures > 0)); then
  dump
  echo "$failures failure(s)"
  exit 1
fi
echo "prometheus_scrape_test: OK (last step $last_step, scraped $scraped)"
