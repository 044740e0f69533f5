#!/usr/bin/env python3
"""How hard is a repair instance to fix by a single patch? (docs/learning.md, "repair")

A transcription of GenerateRepair (src/flywheel/env/tasks/repair.cc) with Python's random in
place of mt19937_64: the same distributions of programs, bugs and test inputs, not the same
instances. For each sampled instance it counts the well-formed single-line patches (every
operator and operand the language accepts on that line) that make all tests pass.

  /usr/bin/python3 bench/repair_fixes.py [--instances 2000] [--lines 6] [--tests 6]
"""
import argparse
import random

UNITS = [1, 3, 7, 9]


def random_op(r):
    return "+-*"[r.randint(0, 2)]


def random_operand(r, line, op):
    if op == "*":
        return ("c", UNITS[r.randint(0, 3)])
    choice = r.randint(0, 2)
    if choice == 0:
        return ("x", 0)
    if choice == 1 and line > 2:
        return ("v", r.randint(1, line - 2))
    return ("c", r.randint(1, 9))


def random_line(r, line):
    op = random_op(r)
    a = ("x", 0) if line == 1 else ("v", line - 1)
    return (op, a, random_operand(r, line, op))


def run(program, x):
    v = [0] * (len(program) + 1)
    out = x % 10

    def value(o):
        return x if o[0] == "x" else v[o[1]] if o[0] == "v" else o[1]

    for i, (op, a, b) in enumerate(program):
        p, q = value(a), value(b)
        r = p + q if op == "+" else p - q if op == "-" else p * q
        out = v[i + 1] = r % 10
    return out


def generate(r, lines, tests):
    correct = [random_line(r, i) for i in range(1, lines + 1)]
    inputs = list(range(10))
    r.shuffle(inputs)
    inputs = inputs[:tests]
    buggy = list(correct)
    order = list(range(lines))
    r.shuffle(order)
    for i in order:  # one bug, visible to the tests on its own
        for _ in range(20):
            op, a, b = correct[i]
            mutated = (random_op(r), a, b) if r.random() < 0.5 else (op, a, random_operand(r, i + 1, op))
            alone = list(correct)
            alone[i] = mutated
            if mutated != correct[i] and any(run(alone, x) != run(correct, x) for x in inputs):
                buggy[i] = mutated
                return correct, buggy, inputs
    return correct, buggy, inputs


def patches(line):
    """Every patch the parser accepts on `line` (1-based): a = x or an earlier variable (the
    generator always uses v(line-1), or x on line 1), b = x, an earlier variable or a digit."""
    firsts = [("x", 0)] + [("v", j) for j in range(1, line)]
    seconds = [("x", 0)] + [("v", j) for j in range(1, line)] + [("c", k) for k in range(10)]
    return [(op, a, b) for op in "+-*" for a in firsts for b in seconds]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=2000)
    ap.add_argument("--lines", type=int, default=6)
    ap.add_argument("--tests", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    r = random.Random(args.seed)
    passing = fixes = fixable_lines = candidates = 0
    kept_fixes = kept_candidates = 0  # patches that keep the line's first operand, as the expert's
    for _ in range(args.instances):
        correct, buggy, inputs = generate(r, args.lines, args.tests)
        passing += sum(run(buggy, x) == run(correct, x) for x in inputs) / len(inputs)
        lines_with_fix = set()
        for i in range(args.lines):
            for patch in patches(i + 1):
                candidates += 1
                keeps = patch[1] == buggy[i][1]
                kept_candidates += keeps
                program = list(buggy)
                program[i] = patch
                if all(run(program, x) == run(correct, x) for x in inputs):
                    fixes += 1
                    kept_fixes += keeps
                    lines_with_fix.add(i)
        fixable_lines += len(lines_with_fix)
    n = args.instances
    print(f"{n} instances, {args.lines} lines, {args.tests} tests, one bug:")
    print(f"  tests passing before any patch: {passing / n:.3f}")
    print(f"  well-formed single-line patches: {candidates / n:.0f} per instance")
    print(f"  of them fixing every test: {fixes / n:.2f} per instance, on {fixable_lines / n:.2f} lines")
    print(f"  a patch drawn uniformly at random fixes it: {fixes / candidates:.4f}")
    print(f"  keeping the line's first operand (as the expert does): {kept_candidates / n:.0f} "
          f"patches, {kept_fixes / n:.2f} fixing, {kept_fixes / kept_candidates:.4f} at random")


if __name__ == "__main__":
    main()
