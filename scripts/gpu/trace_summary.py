#!/usr/bin/env python3
"""Sums the GPU kernels of a LibTorch/PyTorch profiler trace (Chrome JSON, Kineto) by name.

What one learner step spends its device time on: the kernels' busy time (the union of their
intervals) against the span from the first kernel's start to the last one's end — a device idle
between kernels waits on the host (launch-bound) — and the time per kind of kernel (matrix
products, attention, the rest) and per kernel name.

usage: trace_summary.py TRACE.json [--top N] > SUMMARY.json
"""
import argparse
import json
import re
from collections import defaultdict

KINDS = [  # first match wins
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|cutlass|xmma|sm90_|sm80_|cublas|matmul", re.I)),
    ("softmax_loss", re.compile(r"softmax|nll|cross_entropy|log_softmax", re.I)),
    ("reduce", re.compile(r"reduce|norm", re.I)),
    ("copy_cast", re.compile(r"copy|cast|cat|index|gather|scatter|fill", re.I)),
]


def kind(name):
    for label, pattern in KINDS:
        if pattern.search(name):
            return label
    return "elementwise_other"


def union_us(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.trace) as f:
        events = json.load(f).get("traceEvents", [])
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    copies = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    launches = sum(1 for e in events if e.get("cat") == "cuda_runtime"
                   and "Launch" in e.get("name", ""))
    by_name = defaultdict(lambda: [0, 0.0])
    by_kind = defaultdict(lambda: [0, 0.0])
    intervals = []
    for e in kernels:
        dur = float(e.get("dur", 0))
        by_name[e["name"]][0] += 1
        by_name[e["name"]][1] += dur
        by_kind[kind(e["name"])][0] += 1
        by_kind[kind(e["name"])][1] += dur
        intervals.append((float(e["ts"]), float(e["ts"]) + dur))
    busy = union_us(intervals)
    span = (max(e for _, e in intervals) - min(s for s, _ in intervals)) if intervals else 0.0
    total = sum(v[1] for v in by_name.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:args.top]
    print(json.dumps({
        "kernels": len(kernels),
        "kernel_launches": launches,
        "kernel_seconds": total / 1e6,
        "busy_seconds": busy / 1e6,
        "span_seconds": span / 1e6,
        "busy_fraction_of_span": busy / span if span else None,
        "copy_seconds": sum(float(e.get("dur", 0)) for e in copies) / 1e6,
        "by_kind": {k: {"count": c, "seconds": us / 1e6, "share": us / total if total else None}
                    for k, (c, us) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])},
        "top_kernels": [{"name": n[:160], "count": c, "seconds": us / 1e6,
                         "share": us / total if total else None} for n, (c, us) in top],
    }, indent=1))


if __name__ == "__main__":
    main()
