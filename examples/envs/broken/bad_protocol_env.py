#!/usr/bin/env python3
"""A deliberately wrong environment: `flywheel env check` must exit non-zero and name each
violation. It speaks an old protocol version, sends "done" as a string, answers score with a
number outside [0, 1], and crashes on requests it does not know instead of replying an error."""
import json
import sys


def main():
    for line in sys.stdin:
        request = json.loads(line)  # crashes on a line that is not JSON
        kind = request["type"]
        if kind == "hello":
            reply = {"type": "hello", "protocol_version": 0, "name": "bad"}
        elif kind == "reset":
            reply = {"type": "observation", "observation": "start", "reward": 0, "done": "no"}
        elif kind == "step":
            reply = {"type": "observation", "observation": "ok", "reward": 1, "done": True}
        elif kind == "score":
            reply = {"type": "score", "score": 7}
        elif kind == "close":
            return 0
        else:
            raise SystemExit(f"unknown request {kind}")
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
