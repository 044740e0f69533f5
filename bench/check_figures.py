#!/usr/bin/env python3
"""Checks the measured figures that README.md and docs/ cite against their result files.

    check_figures.py [--root DIR] [FILE.md ...]

A figure is marked as measured by an HTML comment right after it (invisible when rendered):

    trains 0.84×<!-- fig elastic-2026-12-07b/elastic-seed4-h.json samples_per_s_vs_best_static_steady -->

naming a result file under bench/results/ and the dot-separated path of the value in it (as in
check_json.py: a key may hold dots; `*100` after the path: the page shows a percentage). The
figure is the number that ends at most three characters (a unit: ×, x, %, s) before the
comment. The check fails when the file or
the path is missing, or when the value, rounded to the figure's decimals, is not the figure.
With no FILE, every Markdown file of README.md and docs/ is read (under --root, by default the
checkout this script is in). Prints one line per problem; exit status 1 if any.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_json import is_number, values_at  # noqa: E402

MARK = re.compile(r"<!--\s*fig\s+(\S+)\s+(\S+?)(\*100)?\s*-->")
# A sign (- or the typographic −), thousands separators and decimals: −0.002, 1,007,616.
FIGURE = re.compile(r"([-\u2212]?\d[\d,]*(?:\.(\d+))?)[^\d<>]{0,3}$")


def check_text(text, where, results_dir):
    """Problems with the marked figures of one page's `text`, and how many marks it has."""
    problems = []
    marks = 0
    reports = {}  # result file -> its JSON, or the error reading it: each file read once
    for m in MARK.finditer(text):
        marks += 1
        line = text.count("\n", 0, m.start()) + 1
        at = f"{where}:{line}"
        fig = FIGURE.search(text[max(0, m.start() - 40) : m.start()])
        if not fig:
            problems.append(f"{at}: no figure right before the mark '{m.group(0)}'")
            continue
        shown = float(fig.group(1).replace(",", "").replace("\u2212", "-"))
        decimals = len(fig.group(2) or "")
        path = os.path.join(results_dir, m.group(1))
        if path not in reports:
            try:
                with open(path) as f:
                    reports[path] = json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                reports[path] = e
        report = reports[path]
        if isinstance(report, Exception):
            problems.append(f"{at}: figure {fig.group(1)} cites {m.group(1)}: {report}")
            continue
        values = values_at(report, m.group(2))
        found = values[0] if len(values) == 1 else (values or None)
        if not is_number(found):
            problems.append(
                f"{at}: figure {fig.group(1)} cites {m.group(1)} {m.group(2)}: found {found!r}, "
                "not a number")
            continue
        value = found * (100 if m.group(3) else 1)
        if round(value, decimals) != shown:
            problems.append(
                f"{at}: figure {fig.group(1)} but {m.group(1)} {m.group(2)}{m.group(3) or ''} "
                f"is {value!r} ({round(value, decimals)} at {decimals} decimals)")
    return problems, marks


def pages(root):
    yield os.path.join(root, "README.md")
    docs = os.path.join(root, "docs")
    for name in sorted(os.listdir(docs)):
        if name.endswith(".md"):
            yield os.path.join(docs, name)


def main(argv):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=here)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args(argv)
    results_dir = os.path.join(args.root, "bench", "results")
    problems, marks = [], 0
    for page in args.files or pages(args.root):
        with open(page) as f:
            p, n = check_text(f.read(), os.path.relpath(page, args.root), results_dir)
        problems += p
        marks += n
    for p in problems:
        print(p)
    print(f"check_figures: {marks} marked figures, {len(problems)} problems")
    return 1 if problems or marks == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
