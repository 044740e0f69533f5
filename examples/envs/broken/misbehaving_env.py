#!/usr/bin/env python3
"""guess_env.py with one injected fault, to show how flywheel survives misbehaving environments.

The fault fires when the agent's action is "boom" (so a test chooses the episode it hits), or on
every reset and step with --when always (after the first --after episodes of each process):
  --fault crash    exit with code 3 mid-step, after a message on stderr
  --fault hang     never answer (sleep for an hour)
  --fault chaos    crash, hang or garbage, one of them at random on --rate of all steps
  --fault slow     answer after --delay seconds (then behave)
  --fault garbage  print a line that is not JSON
  --fault huge     answer with an observation of --size bytes (valid JSON)
  --fault refuse   answer {"type": "error"} (a well-formed refusal)
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import guess_env  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", required=True,
                        choices=["crash", "hang", "slow", "garbage", "huge", "refuse", "chaos"])
    parser.add_argument("--when", choices=["boom", "always"], default="boom")
    parser.add_argument("--after", type=int, default=0, help="always: episodes served first")
    parser.add_argument("--rate", type=float, default=0.1, help="chaos: share of faulty steps")
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=1 << 20)
    args = parser.parse_args()
    env = guess_env.Guess(16, 6)
    chance = random.Random(os.getpid())  # each copy (and each restart) misbehaves differently
    resets = 0
    for line in sys.stdin:
        request = json.loads(line)
        kind = request.get("type")
        if kind == "close":
            return 0
        if kind == "reset":
            resets += 1
        if args.when == "always":
            fires = kind in ("reset", "step") and resets > args.after
        else:
            fires = kind == "step" and request.get("action") == "boom"
        fault = args.fault
        if fault == "chaos":
            fires = kind == "step" and chance.random() < args.rate
            fault = chance.choice(["crash", "hang", "garbage"])
        if fires:
            if fault == "crash":
                print("misbehaving_env: injected crash", file=sys.stderr, flush=True)
                os._exit(3)
            if fault == "hang":
                time.sleep(3600)
            if fault == "slow":
                time.sleep(args.delay)
            if fault == "garbage":
                print("this is not json", flush=True)
                continue
            if fault == "huge":
                reply = guess_env.observation("x" * args.size, 0.0, False, env.progress())
                print(json.dumps(reply), flush=True)
                continue
            if fault == "refuse":
                print(json.dumps(guess_env.error("I refuse to play boom")), flush=True)
                continue
        reply = guess_env.handle(env, request)
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
