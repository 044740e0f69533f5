#!/usr/bin/env python3
"""guess_env.py with one injected fault, to show how flywheel survives misbehaving environments.

The fault fires when the agent's action is "boom" (so a test chooses the episode it hits):
  --fault crash    exit with code 3 mid-step, after a message on stderr
  --fault hang     never answer (sleep for an hour)
  --fault slow     answer after --delay seconds (then behave)
  --fault garbage  print a line that is not JSON
  --fault huge     answer with an observation of --size bytes (valid JSON)
  --fault refuse   answer {"type": "error"} (a well-formed refusal)
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import guess_env  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", required=True,
                        choices=["crash", "hang", "slow", "garbage", "huge", "refuse"])
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=1 << 20)
    args = parser.parse_args()
    env = guess_env.Guess(16, 6)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("type") == "close":
            return 0
        if request.get("type") == "step" and request.get("action") == "boom":
            if args.fault == "crash":
                print("misbehaving_env: injected crash", file=sys.stderr, flush=True)
                os._exit(3)
            if args.fault == "hang":
                time.sleep(3600)
            if args.fault == "slow":
                time.sleep(args.delay)
            if args.fault == "garbage":
                print("this is not json", flush=True)
                continue
            if args.fault == "huge":
                reply = guess_env.observation("x" * args.size, 0.0, False, env.progress())
                print(json.dumps(reply), flush=True)
                continue
            if args.fault == "refuse":
                print(json.dumps(guess_env.error("I refuse to play boom")), flush=True)
                continue
        reply = guess_env.handle(env, request)
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
