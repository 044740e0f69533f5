#!/usr/bin/python3
"""Peer of `flywheel bench learner`: the same Llama-style model in plain eager PyTorch, trained
on the same packed micro-batches with the same loss (truncated importance sampling), gradient
clipping and AdamW as flywheel's learner step.

Run by the benchmark with Debian's /usr/bin/python3 (python3-torch). Fair setup: weights loaded
from the benchmark's safetensors file, the same packed rows (block-diagonal causal mask and
positions restarting per document, rebuilt every step as the learner does), the same thread
count, torch.optim.AdamW with its default (foreach) implementation. Prints one JSON object.

usage: learner_python.py --weights W.safetensors --batch B.safetensors --spec SPEC.json
SPEC: {"model": {...}, "micro_batches": [{"rows", "length", "doc_lengths"}], "steps": N,
       "threads": T, "lr", "is_cap", "grad_clip", "betas", "eps", "weight_decay"}
B: mb{i}.{tokens,targets,trainable,behaviour,advantages,loss_weights} as float32 [rows, L].
"""
import argparse
import json
import math
import struct
import time

import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", name
        begin, end = entry["data_offsets"]
        buf = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(buf, dtype=torch.float32) if end > begin else torch.empty(0)
        out[name] = t.reshape(entry["shape"]).clone()
    return out


def packed_layout(doc_lengths, length):
    """positions [B, L] and additive bias [B, 1, 1, L, L]: block-diagonal causal per document,
    padding attends to itself at position 0 (as flywheel's PackedLayout)."""
    rows = len(doc_lengths)
    positions = torch.zeros(rows, length, dtype=torch.int64)
    doc = torch.full((rows, length), -1, dtype=torch.int64)
    for r, docs in enumerate(doc_lengths):
        start = 0
        for d, n in enumerate(docs):
            positions[r, start:start + n] = torch.arange(n)
            doc[r, start:start + n] = d
            start += n
        doc[r, start:] = torch.arange(length - start) + 1000000  # each pad its own document
    same = doc[:, :, None] == doc[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    allowed = same & causal
    bias = torch.zeros(rows, length, length).masked_fill(~allowed, float("-inf"))
    return positions, bias[:, None, None]


class Model:
    def __init__(self, cfg, w):
        self.w = w
        self.h = cfg["num_heads"]
        self.kvh = cfg["num_kv_heads"]
        self.d = cfg["hidden_size"] // self.h
        self.layers = cfg["num_layers"]
        self.eps = cfg["rms_norm_eps"]
        self.inv_freq = cfg["rope_theta"] ** (
            -torch.arange(0, self.d, 2, dtype=torch.float32) / self.d)
        self.head = w.get("lm_head.weight", w["model.embed_tokens.weight"])

    def rms(self, x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    @staticmethod
    def apply_rope(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def forward(self, tokens, positions, bias):
        w = self.w
        b, l = tokens.shape
        x = w["model.embed_tokens.weight"][tokens]
        ang = positions.to(torch.float32)[..., None] * self.inv_freq
        emb = torch.cat([ang, ang], -1)[:, None]
        cos, sin = emb.cos(), emb.sin()
        g = self.h // self.kvh
        for i in range(self.layers):
            p = f"model.layers.{i}."
            hx = self.rms(x, w[p + "input_layernorm.weight"])
            q = F.linear(hx, w[p + "self_attn.q_proj.weight"]).view(b, l, self.h, self.d)
            k = F.linear(hx, w[p + "self_attn.k_proj.weight"]).view(b, l, self.kvh, self.d)
            v = F.linear(hx, w[p + "self_attn.v_proj.weight"]).view(b, l, self.kvh, self.d)
            q = self.apply_rope(q.transpose(1, 2), cos, sin)
            k = self.apply_rope(k.transpose(1, 2), cos, sin)
            v = v.transpose(1, 2)
            qg = q.reshape(b, self.kvh, g * l, self.d)
            scores = (qg @ k.transpose(-1, -2)) / math.sqrt(self.d)
            scores = scores.view(b, self.kvh, g, l, l) + bias
            probs = torch.softmax(scores, -1).view(b, self.kvh, g * l, l)
            att = (probs @ v).view(b, self.h, l, self.d).transpose(1, 2).reshape(b, l, -1)
            x = x + F.linear(att, w[p + "self_attn.o_proj.weight"])
            hx = self.rms(x, w[p + "post_attention_layernorm.weight"])
            x = x + F.linear(F.silu(F.linear(hx, w[p + "mlp.gate_proj.weight"])) *
                             F.linear(hx, w[p + "mlp.up_proj.weight"]),
                             w[p + "mlp.down_proj.weight"])
        return F.linear(self.rms(x, w["model.norm.weight"]), self.head)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--spec", required=True)
    args = ap.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    torch.set_num_threads(spec["threads"])
    weights = read_safetensors(args.weights)
    for t in weights.values():
        t.requires_grad_(True)
    model = Model(spec["model"], weights)
    params = list(weights.values())
    opt = torch.optim.AdamW(params, lr=spec["lr"], betas=tuple(spec["betas"]), eps=spec["eps"],
                            weight_decay=spec["weight_decay"])
    data = read_safetensors(args.batch)
    mbs = []
    for i, mb in enumerate(spec["micro_batches"]):
        get = lambda key: data[f"mb{i}.{key}"]
        mbs.append({"tokens": get("tokens").long(), "targets": get("targets").long(),
                    "trainable": get("trainable") > 0.5, "behaviour": get("behaviour"),
                    "advantages": get("advantages"), "loss_weights": get("loss_weights"),
                    "doc_lengths": mb["doc_lengths"], "length": mb["length"]})
    cap = spec["is_cap"]

    def step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for mb in mbs:
            positions, bias = packed_layout(mb["doc_lengths"], mb["length"])
            logits = model.forward(mb["tokens"], positions, bias)
            logp = torch.log_softmax(logits, -1).gather(-1, mb["targets"][..., None])[..., 0]
            weight = (logp.detach() - mb["behaviour"]).exp().clamp_max(cap)
            term = -weight * mb["advantages"] * logp
            loss = (mb["loss_weights"] * torch.where(mb["trainable"], term, 0.0)).sum()
            loss.backward()
            total += loss.item()
        if spec["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, spec["grad_clip"])
        opt.step()
        return total

    step()  # warm-up
    losses = []
    start = time.perf_counter()
    for _ in range(spec["steps"]):
        losses.append(step())
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "steps": spec["steps"], "losses": losses,
                      "torch_version": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
