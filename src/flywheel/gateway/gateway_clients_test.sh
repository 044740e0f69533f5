#!/usr/bin/env bash
# `flywheel serve gateway` with agents' own clients: the official `openai` npm package
# (testdata/openai_client.mjs) and Python's urllib (testdata/urllib_client.py) each complete chat
# calls with tools, a multi-turn exchange, a stream, n = 2 and a refused request, against a tiny
# random Qwen3 directory (real tokenizer and chat template). Each client is an execution of its
# own; finished, both are in the gateway's call log, which the trajectory processor reads. Then
# examples/agents/guess_agent.py plays the job's environment through the gateway and is scored
# by it.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
source "$SOURCE/src/flywheel/runtime/process_test_lib.sh"

[[ -f "$SOURCE/third_party/tokenizers/qwen3/tokenizer.json" ]] ||
  die "third_party/tokenizers/qwen3 is missing: run scripts/setup, which fetches the Qwen3 tokenizer"
[[ -f "$SOURCE/third_party/node_modules/openai/package.json" ]] ||
  die "third_party/node_modules/openai is missing: run scripts/setup, which fetches the OpenAI client"
MODEL="$TMP/qwen3-tiny"
/usr/bin/python3 "$SOURCE/src/flywheel/model/testdata/hf_tiny_chat_model.py" "$MODEL" \
  "$SOURCE/third_party/tokenizers/qwen3" || die "writing the tiny Qwen3 directory failed"
echo "admin-secret" >"$TMP/admin.token"

"$FLYWHEEL" serve gateway "$SOURCE/examples/guess.toml" --set model.path="\"$MODEL\"" \
  gateway.model_name='"tiny-qwen3"' --address 127.0.0.1:0 --record "$TMP/calls.jsonl" \
  --auth-token-file "$TMP/admin.token" >"$TMP/gateway.log" 2>&1 &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
wait_for 60 grep -qs "gateway serving on" "$TMP/gateway.log" || die "the gateway did not start"
grep -q "chat template, tool calls hermes" "$TMP/gateway.log" ||
  fail "the gateway does not render with the directory's chat template and its tool calls"
ADDRESS=$(sed -n 's/.*gateway serving on \([0-9.:]*\) .*/\1/p' "$TMP/gateway.log")

# open NAME: an execution for one client; prints "ID TOKEN".
open_execution() {
  curl -sf -H "Authorization: Bearer admin-secret" -d "{\"execution_id\": \"$1\"}" \
    "http://$ADDRESS/executions" |
    python3 -c 'import json,sys; e=json.load(sys.stdin); print(e["execution_id"], e["token"])'
}

for client in node python; do
  read -r ID TOKEN < <(open_execution "agent-$client") || die "opening an execution failed"
  if [[ $client == node ]]; then
    command=(node "$SOURCE/src/flywheel/gateway/testdata/openai_client.mjs")
  else
    command=(python3 "$SOURCE/src/flywheel/gateway/testdata/urllib_client.py")
  fi
  OPENAI_BASE_URL="http://$ADDRESS/$ID/v1" OPENAI_API_KEY="$TOKEN" MODEL=tiny-qwen3 \
    timeout 120 "${command[@]}" >"$TMP/$client.out" 2>"$TMP/$client.log" ||
    fail "the $client client failed: $(tail -n 3 "$TMP/$client.log")"
  python3 - "$TMP/$client.out" <<'PY' || fail "the $client client's answers are wrong"
import json, sys
calls = {c["call"]: c for c in map(json.loads, open(sys.argv[1]))}
assert list(calls) == ["tools", "multi_turn", "stream", "n", "bad_request"], list(calls)
t = calls["tools"]
assert t["model"] == "tiny-qwen3" and t["finish_reason"] in ("stop", "length", "tool_calls"), t
assert t["usage"]["completion_tokens"] >= 1 and t["n_logprobs"] >= 1, t
assert calls["multi_turn"]["usage"]["prompt_tokens"] > t["usage"]["prompt_tokens"], calls
s = calls["stream"]
assert s["ids_consistent"] and s["chunks"] >= 3 and s["finish_reason"] in ("stop", "length"), s
assert s["usage"] and s["usage"]["completion_tokens"] >= 1, s
assert calls["n"] == {"call": "n", "choices": 2, "indices": [0, 1]}, calls["n"]
b = calls["bad_request"]
assert b["status"] == 400 and b["type"] == "invalid_request_error", b
PY
  curl -sf -H "Authorization: Bearer $TOKEN" -d '{"reward": 1.0}' "http://$ADDRESS/$ID/finish" \
    >/dev/null || fail "finishing the $client client's execution failed"
done

# examples/agents/guess_agent.py plays the job's environment through the gateway (its reset and
# steps; a retry from the same state on "invalid"), and the environment scores it.
read -r ID TOKEN < <(open_execution "agent-guess") || die "opening an execution failed"
OPENAI_BASE_URL="http://$ADDRESS/$ID/v1" OPENAI_API_KEY="$TOKEN" \
  timeout 120 python3 "$SOURCE/examples/agents/guess_agent.py" --max-turns 3 \
  >"$TMP/guess.out" 2>"$TMP/guess.log" || fail "the guess agent failed: $(tail -n 3 "$TMP/guess.log")"
python3 - "$TMP/guess.out" <<'PY' || fail "the guess agent's execution was not scored by the environment"
import json, sys
finished = json.load(open(sys.argv[1]))
assert finished["execution_id"] == "agent-guess", finished
assert finished["termination"] in ("done", "timeout") and "reward" in finished, finished
assert finished["calls"] >= 3, finished  # at least one call per turn
PY

kill -TERM "$GATEWAY_PID"
wait_exit "$GATEWAY_PID" 30
[[ $STATUS == 0 ]] || fail "the gateway did not stop cleanly on SIGTERM (status $STATUS)"
# Each client made 5 calls that generated (tools, multi_turn, stream, and n = 2 as two siblings).
python3 - "$TMP/calls.jsonl" <<'PY' || fail "the call log does not hold both executions' calls"
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1])]
calls = {}
for l in lines:
    if l["type"] == "call":
        calls.setdefault(l["execution_id"], []).append(l)
assert sorted(calls) == ["agent-guess", "agent-node", "agent-python"], sorted(calls)
for execution, cs in calls.items():
    assert execution == "agent-guess" or len(cs) == 5, (execution, len(cs))
    assert all(len(c["generated"]) == len(c["logprobs"]) >= 1 for c in cs), execution
PY
"$FLYWHEEL" trajectory stats "$TMP/calls.jsonl" >"$TMP/stats.log" 2>&1 ||
  fail "flywheel trajectory stats cannot read the gateway's call log: $(tail -n 2 "$TMP/stats.log")"
grep -q "agent-node" "$TMP/stats.log" || fail "the trajectory processor did not see agent-node"
((failures == 0)) || {
  dump
  exit 1
}
echo "PASS"
