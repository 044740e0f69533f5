#!/usr/bin/env python3
"""An agent that plays the job's task through flywheel's gateway, with nothing but Python's
standard library: the model is reached through the OpenAI chat-completions API, the task through
the gateway's environment routes, which also score the execution (the agent reports no reward).

    OPENAI_BASE_URL=http://127.0.0.1:8400/EXECUTION/v1 OPENAI_API_KEY=TOKEN \
        python3 examples/agents/guess_agent.py [--max-turns 8] [--max-tokens 4]

Each turn sends the whole conversation (as agents do); an answer the environment calls
"invalid" is asked again once from the same state (a retry: a branch of the execution's tree).
Prints the gateway's answer to /finish as one JSON line. docs/agents.md explains the routes.
"""
import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def post(url, key, body):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.load(answer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=4)
    args = parser.parse_args()
    base, key = os.environ["OPENAI_BASE_URL"].rstrip("/"), os.environ["OPENAI_API_KEY"]
    execution = base[: -len("/v1")] if base.endswith("/v1") else base

    def chat(messages):
        answer = post(f"{base}/chat/completions", key,
                      {"model": "policy", "messages": messages, "max_tokens": args.max_tokens})
        return answer["choices"][0]["message"]["content"] or ""

    observation = post(f"{execution}/env/reset", key, {})["observation"]
    messages = [{"role": "user", "content": observation}]
    for _ in range(args.max_turns):
        action = chat(messages)
        step = post(f"{execution}/env/step", key, {"action": action})
        if step["observation"] == "invalid" and not step["done"]:
            action = chat(messages)  # once more from the same state
            step = post(f"{execution}/env/step", key, {"action": action})
        messages += [{"role": "assistant", "content": action},
                     {"role": "user", "content": step["observation"]}]
        if step["done"]:
            break
    print(json.dumps(post(f"{execution}/finish", key, {})))


if __name__ == "__main__":
    try:
        main()
    except urllib.error.HTTPError as error:  # the gateway says why in OpenAI's error shape
        print(f"guess_agent: {error.code} {error.read().decode()}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # noqa: BLE001 - any other failure is reported the same way
        print(f"guess_agent: {error}", file=sys.stderr)
        sys.exit(1)
