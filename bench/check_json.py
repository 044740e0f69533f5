#!/usr/bin/env python3
"""Checks the values of a benchmark's JSON report, for the benchmarks' smoke tests.

    check_json.py REPORT CHECK...

Each CHECK is one of
    PATH>X  PATH>=X  PATH<X  PATH<=X   every value at PATH is a finite number in that relation
    PATH==V                            every value at PATH equals V (true, false, a number or text)
    PATH~PATH2@TOL                     the numbers (or lists of numbers) at both paths agree
                                       within TOL, element by element
    PATH:number                        every value at PATH is a finite number (a figure a run
                                       too short to judge must still compute)
    PATH                               something is at PATH
    A|B                                check A holds, or else check B

PATH is dot-separated keys (a key may hold dots); `*` stands for every key of an object or every element of a list.
A path that names nothing fails its check, so a renamed field cannot pass unnoticed.
"""
import json
import math
import re
import sys


def values_at(node, path):
    """Every value at the dot-separated `path` below `node`."""
    if not path:
        return [node]
    head, _, rest = path.partition(".")
    if head == "*":
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        return [v for child in children for v in values_at(child, rest)]
    if isinstance(node, dict) and head in node:
        return values_at(node[head], rest)
    if isinstance(node, dict):  # a key holding dots ("x0.1"): the longest one the path starts with
        for key in sorted(node, key=len, reverse=True):
            if path == key or path.startswith(key + "."):
                return values_at(node[key], path[len(key) + 1 :])
    if isinstance(node, list) and head.isdigit() and int(head) < len(node):
        return values_at(node[int(head)], rest)
    return []


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def flatten(v):
    return [x for item in v for x in flatten(item)] if isinstance(v, list) else [v]


def literal(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


COMPARE = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


def check(report, spec):
    """None when `spec` holds, else what is wrong."""
    if "|" in spec:
        errors = [check(report, alternative) for alternative in spec.split("|")]
        return None if None in errors else " and ".join(errors)
    m = re.fullmatch(r"([^~]+)~([^@]+)@(.+)", spec)
    if m:
        a, b = values_at(report, m.group(1)), values_at(report, m.group(2))
        if not a or not b:
            return f"{spec}: nothing at {m.group(1) if not a else m.group(2)}"
        xs, ys = flatten(a), flatten(b)
        tol = float(m.group(3))
        if len(xs) != len(ys) or not all(map(is_number, xs + ys)):
            return f"{spec}: {xs} and {ys} are not numbers of the same shape"
        worst = max(abs(x - y) for x, y in zip(xs, ys))
        return None if worst <= tol else f"{spec}: differ by {worst}"
    if spec.endswith(":number"):
        path = spec[: -len(":number")]
        found = values_at(report, path)
        bad = [v for v in found if not is_number(v)]
        return None if found and not bad else f"{spec}: found {bad or 'nothing'}"
    m = re.fullmatch(r"(.+?)(==|>=|<=|>|<)(.+)", spec)
    if not m:
        return None if values_at(report, spec) else f"nothing at {spec}"
    path, op, expected = m.group(1), m.group(2), literal(m.group(3))
    found = values_at(report, path)
    if not found:
        return f"{spec}: nothing at {path}"
    for v in found:
        if op == "==":
            if v != expected or isinstance(v, bool) != isinstance(expected, bool):
                return f"{spec}: found {v!r}"
        elif not is_number(v) or not COMPARE[op](v, expected):
            return f"{spec}: found {v!r}"
    return None


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        report = json.load(f)
    errors = [e for e in (check(report, spec) for spec in argv[2:]) if e]
    for e in errors:
        print(f"{argv[1]}: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
