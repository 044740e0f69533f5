#!/usr/bin/env bash
# The job as separate processes over mutual TLS with an auth token, the buffer and the weights
# listening on all interfaces (0.0.0.0), which a token without TLS may not: `flywheel serve buffer` (its
# certificate from the config, buffer.tls_cert / buffer.tls_key), a `flywheel learner` serving
# its weights over TLS, one `flywheel actor`; then an elastic core with a `flywheel cell`, the
# scheduler over TLS too. Certificates come from rpc/make_test_certs.sh (the openssl command).
# Both runs must reach max_steps and every process end cleanly. Also: what is refused, with an
# error that says why: a token in the clear beyond loopback (server and client, and --insecure
# lifting it), a plaintext client or one without a client certificate, a missing certificate.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$(dirname "$0")/process_test_lib.sh"

CERTS="$TMP/certs"
bash "$SOURCE/src/flywheel/rpc/make_test_certs.sh" "$CERTS" >/dev/null || die "openssl made no certificates"
echo "token-$RANDOM-$RANDOM" >"$TMP/token"
CLIENT_TLS=(--tls-ca "$CERTS/ca.pem" --tls-client-cert "$CERTS/client.pem"
            --tls-client-key "$CERTS/client.key")
SERVER_TLS=(--tls-cert "$CERTS/server.pem" --tls-key "$CERTS/server.key"
            --tls-client-ca "$CERTS/ca.pem")
CONFIG="$SOURCE/examples/guess.toml"
SETS=(run.runs_dir="\"$TMP/runs\"" run.name='"tls"' run.max_steps=6 run.max_wall_seconds=$((100 * SCALE))
      run.batch_groups=2 actor.group_size=4 actor.episodes_in_flight=8
      env.latency.model='"constant"' env.latency.mean_ms=1)
METRICS="$TMP/runs/tls/metrics.jsonl"
last_step() { tail -n 1 "$1" | python3 -c "import json, sys; print(json.load(sys.stdin)['step'])"; }
port_of() { sed -n "s/.*$1 [0-9.]*:\([0-9]*\) .*/\1/p" "$2" | head -n 1; }

# A token in the clear on all interfaces: the server refuses to start, naming the fix ...
err=$("$FLYWHEEL" serve buffer --address 0.0.0.0:0 --auth-token-file "$TMP/token" 2>&1)
[[ $? -ne 0 ]] || fail "a buffer with a token and no TLS on 0.0.0.0 started"
grep -q "refusing to serve on 0.0.0.0:0 with an auth token but without TLS" <<<"$err" ||
  fail "plaintext token server error unclear: $err"
grep -q -- "--insecure" <<<"$err" || fail "the plaintext token error does not name --insecure: $err"
# ... and the client refuses to send it to an address other machines can reach (TEST-NET-1).
err=$("$FLYWHEEL" actor "$CONFIG" --buffer 192.0.2.1:7300 --weights 192.0.2.1:7400 \
      --auth-token-file "$TMP/token" --connect-timeout 1 2>&1)
[[ $? -ne 0 ]] || fail "an actor sent its token in the clear to 192.0.2.1"
grep -q "refusing to send the auth token in the clear" <<<"$err" ||
  fail "plaintext token client error unclear: $err"
# --insecure lifts the rule (the actor then fails for want of a service there, not of TLS).
err=$("$FLYWHEEL" actor "$CONFIG" --buffer 192.0.2.1:7300 --weights 192.0.2.1:7400 \
      --auth-token-file "$TMP/token" --connect-timeout 1 --insecure 2>&1)
grep -q "cannot reach the weights service at 192.0.2.1:7400" <<<"$err" ||
  fail "--insecure did not let the actor try 192.0.2.1: $err"
# A certificate that is not there is named with its flag.
err=$("$FLYWHEEL" serve buffer --tls-cert "$TMP/missing.pem" --tls-key "$CERTS/server.key" 2>&1)
[[ $? -ne 0 ]] || fail "a buffer with a missing certificate started"
grep -q -- "--tls-cert $TMP/missing.pem: no such file" <<<"$err" ||
  fail "missing certificate error unclear: $err"

# A buffer (log $1): its certificate from the config, mutual TLS from the flag. Sets BUFFER_PID
# and BUFFER.
start_buffer() {
  "$FLYWHEEL" --log-level warn serve buffer --config "$CONFIG" --set buffer.group_size=4 \
    buffer.max_size=64 buffer.tls_cert="\"$CERTS/server.pem\"" buffer.tls_key="\"$CERTS/server.key\"" \
    --tls-client-ca "$CERTS/ca.pem" --address 0.0.0.0:0 --auth-token-file "$TMP/token" \
    >"$TMP/$1" 2>&1 &
  BUFFER_PID=$!
  PIDS+=("$BUFFER_PID")
  wait_for 20 grep -qs "serving on" "$TMP/$1" || die "the buffer did not start"
  grep -q "tls=mutual" "$TMP/$1" || fail "the buffer does not say it serves mutual TLS"
  BUFFER="127.0.0.1:$(port_of "serving on" "$TMP/$1")"
}
# The buffer ends on SIGTERM with status 0.
stop_buffer() {
  kill -TERM "$BUFFER_PID"
  wait_exit "$BUFFER_PID" 20
  [[ "$STATUS" == 0 ]] || fail "the buffer did not exit 0 on SIGTERM (status $STATUS)"
}
start_buffer buffer.log

"$FLYWHEEL" --log-level warn learner "$CONFIG" --buffer "$BUFFER" --weights-listen 0.0.0.0:0 \
  --auth-token-file "$TMP/token" "${SERVER_TLS[@]}" "${CLIENT_TLS[@]}" --set "${SETS[@]}" \
  >"$TMP/learner.log" 2>&1 &
LEARNER_PID=$!
PIDS+=("$LEARNER_PID")
wait_for 30 grep -qs "serving weights on" "$TMP/learner.log" || die "the learner did not start"
WEIGHTS="127.0.0.1:$(port_of "serving weights on" "$TMP/learner.log")"

# A client without TLS, or without a client certificate, cannot reach the services.
err=$("$FLYWHEEL" actor "$CONFIG" --buffer "$BUFFER" --weights "$WEIGHTS" \
      --auth-token-file "$TMP/token" --connect-timeout 2 --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "a plaintext actor reached the TLS services"
grep -q "cannot reach the weights service at $WEIGHTS" <<<"$err" ||
  fail "plaintext actor error unclear: $err"
err=$("$FLYWHEEL" actor "$CONFIG" --buffer "$BUFFER" --weights "$WEIGHTS" \
      --auth-token-file "$TMP/token" --tls-ca "$CERTS/ca.pem" --connect-timeout 2 \
      --set "${SETS[@]}" 2>&1)
[[ $? -ne 0 ]] || fail "an actor without a client certificate reached the mutual TLS services"

"$FLYWHEEL" --log-level warn actor "$CONFIG" --buffer "$BUFFER" --weights "$WEIGHTS" \
  --auth-token-file "$TMP/token" "${CLIENT_TLS[@]}" --poll-interval 0.2 --set "${SETS[@]}" \
  >"$TMP/actor.log" 2>&1 &
ACTOR_PID=$!
PIDS+=("$ACTOR_PID")
wait_exit "$LEARNER_PID" 90
[[ "$STATUS" == 0 ]] || fail "the learner over TLS did not exit 0 (status $STATUS)"
[[ -f "$METRICS" && $(last_step "$METRICS") == 6 ]] || fail "the learner over TLS did not reach max_steps"
wait_exit "$ACTOR_PID" 20
[[ "$STATUS" == 0 ]] || fail "the actor over TLS did not exit 0 (status $STATUS)"
grep -q "weights version" "$TMP/actor.log" || fail "the actor got no weights over TLS"

stop_buffer

# The elastic core and a cell: the scheduler over mutual TLS as well. On 127.0.0.1: the core
# hands its cells the weights and store addresses it listens on, and a wildcard address is no
# name a certificate can carry. A buffer of its own: the core's one cell trains, so every group
# of its steps is one the satellite rolled out over TLS (with the first run's groups left in
# the buffer, the core could end before the cell registered).
start_buffer elastic-buffer.log
ESETS=(run.mode='"elastic"' run.runs_dir="\"$TMP/runs\"" run.name='"tls-elastic"' run.max_steps=4
       run.max_wall_seconds=$((100 * SCALE)) run.batch_groups=2 actor.group_size=4 actor.episodes_in_flight=8
       scheduler.cells=2 scheduler.heartbeat_seconds=0.1 env.latency.mean_ms=1)
"$FLYWHEEL" --log-level warn learner "$CONFIG" --buffer "$BUFFER" --weights-listen 127.0.0.1:0 \
  --scheduler-listen 127.0.0.1:0 --auth-token-file "$TMP/token" "${SERVER_TLS[@]}" \
  "${CLIENT_TLS[@]}" --set "${ESETS[@]}" >"$TMP/core.log" 2>&1 &
CORE_PID=$!
PIDS+=("$CORE_PID")
wait_for 30 grep -qs "scheduler on" "$TMP/core.log" || die "the elastic core did not start"
SCHEDULER=$(sed -n 's/.*scheduler on \([0-9.:]*\) .*/\1/p' "$TMP/core.log")
"$FLYWHEEL" --log-level warn cell "$CONFIG" --scheduler "$SCHEDULER" --buffer "$BUFFER" \
  --auth-token-file "$TMP/token" "${CLIENT_TLS[@]}" --set "${ESETS[@]}" >"$TMP/cell.log" 2>&1 &
CELL_PID=$!
PIDS+=("$CELL_PID")
wait_exit "$CORE_PID" 90
[[ "$STATUS" == 0 ]] || fail "the elastic core over TLS did not exit 0 (status $STATUS)"
EMETRICS="$TMP/runs/tls-elastic/metrics.jsonl"
[[ -f "$EMETRICS" && $(last_step "$EMETRICS") == 4 ]] || fail "the elastic run did not reach max_steps"
wait_exit "$CELL_PID" 20
[[ "$STATUS" == 0 ]] || fail "the cell over TLS did not exit 0 (status $STATUS)"
grep -q "registered with scheduler at $SCHEDULER" "$TMP/cell.log" ||
  fail "the cell never registered with the core over TLS"
grep -Eq "stopped \(the core finished\): [1-9][0-9]* episodes inserted" "$TMP/cell.log" ||
  fail "the cell inserted no episodes over TLS"
stop_buffer
if grep -E -l "terminate called|Segmentation|Aborted|flywheel: error:" "$TMP"/*.log; then
  fail "a process crashed or reported an error"
fi
if ((failures > 0)); then
  dump
  echo "$failures failure(s)"
  exit 1
fi
echo "tls_processes_test: OK (a learner, an actor, an elastic core and a cell over mutual TLS)"
