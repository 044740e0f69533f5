#!/usr/bin/env python3
"""guess as an external flywheel environment (protocol version 1, docs/env-protocol.md).

Find a hidden number in [0, RANGE) from "higher" / "lower" feedback. Standard library only:

    flywheel env check -- python3 examples/envs/guess_env.py
    [env]
    kind = "process"
    [env.process]
    command = ["python3", "examples/envs/guess_env.py", "--range", "16"]

One JSON object per line on stdin (requests) and stdout (replies); stdout carries nothing else
(log to stderr). Every request gets exactly one reply, except close.
"""
import argparse
import json
import random
import sys

PROTOCOL_VERSION = 1


class Guess:
    def __init__(self, value_range, max_guesses):
        self.range = value_range
        self.max_guesses = max_guesses
        self.hidden = None  # None: no episode running
        self.done = True

    def vocabulary(self):
        return ["go", "higher", "lower", "correct", "invalid"] + [str(i) for i in range(self.range)]

    def reset(self, seed):
        # The same seed must give the same instance: G rollouts of a group share it.
        self.hidden = random.Random(seed).randrange(self.range)
        self.guesses = 0
        self.lo, self.hi = 0, self.range - 1
        self.done = False
        return observation("go", 0.0, False, self.progress())

    def step(self, action):
        self.guesses += 1
        reward = 0.0
        try:
            guess = int(action.strip())
        except ValueError:
            guess = None
        if guess is None or not 0 <= guess < self.range:
            text = "invalid"
        elif guess == self.hidden:
            text, reward, self.done = "correct", 1.0, True
            self.lo = self.hi = guess
        elif guess < self.hidden:
            text, self.lo = "higher", max(self.lo, guess + 1)
        else:
            text, self.hi = "lower", min(self.hi, guess - 1)
        if self.guesses >= self.max_guesses:
            self.done = True
        return observation(text, reward, self.done, self.progress())

    def progress(self):
        """Fraction of the range ruled out so far: the partial score."""
        return 1.0 - (self.hi - self.lo) / (self.range - 1)


def observation(text, reward, done, partial_score):
    return {"type": "observation", "observation": text, "reward": reward, "done": done,
            "partial_score": partial_score}


def error(message):
    return {"type": "error", "message": message}


def handle(env, request):
    kind = request.get("type")
    if kind == "hello":
        return {"type": "hello", "protocol_version": PROTOCOL_VERSION, "name": "guess",
                "vocabulary": {"kind": "words", "words": env.vocabulary()}}
    if kind == "reset":
        seed = request.get("seed")
        if not isinstance(seed, int):
            return error("reset needs an integer seed")
        return env.reset(seed)
    if kind == "step":
        if env.done:
            return error("step without a running episode (reset first)")
        action = request.get("action")
        if not isinstance(action, str):
            return error("step needs a string action")
        return env.step(action)
    if kind == "score":
        if env.hidden is None:
            return error("score before the first reset")
        return {"type": "score", "score": env.progress()}
    return error(f"unknown request type {kind!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--range", type=int, default=16)
    parser.add_argument("--max-guesses", type=int, default=6)
    args = parser.parse_args()
    env = Guess(args.range, args.max_guesses)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError:
            reply = error(f"request is not a JSON object: {line.strip()[:100]}")
        else:
            if request.get("type") == "close":
                return 0
            reply = handle(env, request)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
