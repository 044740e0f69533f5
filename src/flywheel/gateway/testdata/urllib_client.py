#!/usr/bin/env python3
"""A client of flywheel's gateway tests: drives an OpenAI-compatible server with Python's standard
library only (urllib.request, json), using the chat-completions API exactly as agents do: POST with
a bearer key, and server-sent events read line by line for streams. Inputs from the environment:
OPENAI_BASE_URL (http://HOST:PORT/EXEC_ID/v1), OPENAI_API_KEY, MODEL. Prints one JSON object per
completed call, one line each; on any failure a message on stderr and exit code 1. It makes the
same calls as openai_client.mjs, which uses the official OpenAI client.

    python3 src/flywheel/gateway/testdata/urllib_client.py
"""
import json
import os
import sys
import urllib.error
import urllib.request


def env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set")
    return value


def post(body):
    """Opens POST $OPENAI_BASE_URL/chat/completions with BODY and $MODEL; raises HTTPError on an
    error status."""
    request = urllib.request.Request(
        env("OPENAI_BASE_URL").rstrip("/") + "/chat/completions",
        data=json.dumps({"model": env("MODEL"), **body}).encode(),
        headers={"Authorization": f"Bearer {env('OPENAI_API_KEY')}",
                 "Content-Type": "application/json"},
        method="POST",
    )
    return urllib.request.urlopen(request, timeout=60)


def create(body):
    with post(body) as response:
        return json.load(response)


def create_stream(body):
    """Yields the JSON of each `data:` event of a streamed completion, up to `data: [DONE]`."""
    with post({**body, "stream": True}) as response:
        for raw in response:
            line = raw.decode().rstrip("\r\n")
            if not line.startswith("data:"):
                continue  # blank separators, comments, other fields
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                return
            event = json.loads(data)
            if "error" in event:
                raise RuntimeError(f"stream error: {event['error']}")
            yield event
    raise RuntimeError("stream ended without data: [DONE]")


def emit(obj):
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def main():
    # 1. tools: a tool list, sampling parameters and logprobs.
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    tools = [{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }]
    first = create({"messages": messages, "tools": tools, "temperature": 1.0, "max_tokens": 16,
                    "seed": 7, "logprobs": True})
    choice = first["choices"][0]
    message = choice["message"]
    logprobs = (choice.get("logprobs") or {}).get("content")
    emit({"call": "tools", "id": first["id"], "model": first["model"],
          "finish_reason": choice["finish_reason"], "content": message.get("content"),
          "tool_calls": message.get("tool_calls"),
          "n_logprobs": None if logprobs is None else len(logprobs),
          "usage": first.get("usage")})

    # 2. multi_turn: the exchange continued with the assistant's reply and the tool's answer.
    reply = {"role": "assistant", "content": message.get("content")}
    tool_calls = message.get("tool_calls") or []
    if tool_calls:
        reply["tool_calls"] = tool_calls
        answer = {"role": "tool", "tool_call_id": tool_calls[0]["id"], "content": '{"temp_c": 21}'}
    else:
        answer = {"role": "user", "content": "Thanks."}
    second = create({"messages": messages + [reply, answer], "tools": tools, "max_tokens": 8})
    emit({"call": "multi_turn", "finish_reason": second["choices"][0]["finish_reason"],
          "content": second["choices"][0]["message"].get("content"),
          "usage": second.get("usage")})

    # 3. stream: server-sent chunks, the last one carrying the usage.
    chunks, content, finish_reason, usage, ids = 0, "", None, None, set()
    for chunk in create_stream({"messages": [{"role": "user", "content": "Count to three."}],
                                "max_tokens": 12, "temperature": 0.7, "seed": 3,
                                "stream_options": {"include_usage": True}}):
        chunks += 1
        ids.add(chunk.get("id"))
        for c in chunk.get("choices") or []:
            if c["index"] != 0:
                continue
            content += (c.get("delta") or {}).get("content") or ""
            finish_reason = c.get("finish_reason") or finish_reason
        usage = chunk.get("usage") or usage
    emit({"call": "stream", "chunks": chunks, "content": content, "finish_reason": finish_reason,
          "usage": usage, "ids_consistent": len(ids) == 1})

    # 4. n: several choices for one prompt.
    many = create({"messages": [{"role": "user", "content": "Say something."}], "n": 2,
                   "max_tokens": 4})
    emit({"call": "n", "choices": len(many["choices"]),
          "indices": [c["index"] for c in many["choices"]]})

    # 5. bad_request: no messages; the server must refuse it with an OpenAI-shaped error.
    try:
        create({"messages": []})
    except urllib.error.HTTPError as err:
        error = json.loads(err.read()).get("error") or {}
        emit({"call": "bad_request", "status": err.code, "type": error.get("type"),
              "message": error.get("message")})
        return
    raise RuntimeError("bad_request: a request without messages succeeded")


if __name__ == "__main__":
    try:
        main()
    except urllib.error.HTTPError as err:
        print(f"urllib_client: HTTP {err.code}: {err.read().decode(errors='replace')}",
              file=sys.stderr)
        sys.exit(1)
    except Exception as err:  # any failure fails the test, with its reason
        print(f"urllib_client: {type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(1)
