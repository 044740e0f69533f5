#!/usr/bin/env python3
"""Checks the measured figures that README.md and docs/ cite against their result files.

    check_figures.py [--root DIR] [FILE.md ...]

A figure is marked as measured by an HTML comment right after it (invisible when rendered):

    trains 0.84×<!-- fig elastic-2026-12-07b/elastic-seed4-h.json samples_per_s_vs_best_static_steady -->

naming a result file under bench/results/ and the dot-separated path of the value in it (a key
may hold dots; `*100` after the path: the page shows a percentage). The figure is the number that ends at
most three characters (a unit: ×, x, %, s) before the comment. The check fails when the file or
the path is missing, or when the value, rounded to the figure's decimals, is not the figure.
With no FILE, every Markdown file of README.md and docs/ is read (under --root, by default the
checkout this script is in). Prints one line per problem; exit status 1 if any.
"""
import argparse
import json
import os
import re
import sys

MARK = re.compile(r"<!--\s*fig\s+(\S+)\s+(\S+?)(\*100)?\s*-->")
# A sign (- or the typographic −), thousands separators and decimals: −0.002, 1,007,616.
FIGURE = re.compile(r"([-\u2212]?\d[\d,]*(?:\.(\d+))?)[^\d<>]{0,3}$")


def lookup(node, path):
    """The value at the dot-separated `path` below `node`, a key holding dots included ("x0.1");
    None when it names nothing."""
    if not path:
        return node
    if isinstance(node, dict):
        for key in sorted(node, key=len, reverse=True):
            if path == key or path.startswith(key + "."):
                found = lookup(node[key], path[len(key) + 1 :])
                if found is not None:
                    return found
    if isinstance(node, list):
        head, _, rest = path.partition(".")
        if head.isdigit() and int(head) < len(node):
            return lookup(node[int(head)], rest)
    return None


def check_text(text, where, results_dir):
    """Problems with the marked figures of one page's `text`, and how many marks it has."""
    problems = []
    marks = 0
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
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            problems.append(f"{at}: figure {fig.group(1)} cites {m.group(1)}: {e}")
            continue
        found = lookup(report, m.group(2))
        if not isinstance(found, (int, float)) or isinstance(found, bool):
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
