#!/usr/bin/python3
"""Peer of `flywheel bench learner`: the same Llama-style model in plain eager PyTorch, trained
on the same packed micro-batches with the same loss (truncated importance sampling), gradient
clipping and AdamW as flywheel's learner step.

Run by the benchmark with Debian's /usr/bin/python3 (python3-torch). Fair setup: weights loaded
from the benchmark's safetensors file, the same packed rows (positions restarting per document,
rebuilt every step as the learner does), the same thread count, torch.optim.AdamW with its
default (foreach) implementation, and the projections a PyTorch user fuses for training: q/k/v
and gate/up are concatenated once at load time into single parameters (one GEMM each instead of
three and two; the global gradient norm and AdamW's element-wise update are unchanged by it).

--attention picks how a packed row attends (torch 1.13 has no SDPA or varlen kernel):
  documents  (default) causal attention within each document, a loop of batched matmuls over
             the documents of every row — what flywheel's DocumentAttention computes, the
             way a PyTorch user writes it; padding attends to itself only
  dense      one [L, L] score matrix per row with a block-diagonal causal additive mask
  sdpa       the documents loop with F.scaled_dot_product_attention (is_causal, grouped-query
             heads without copies: enable_gqa) per document: flash attention on CUDA, what
             flywheel's GPU build runs; torch 2.5+

On a GPU (spec "device": "cuda", "dtype": "bfloat16") the float32 master weights, the batch and
AdamW's state live on the device and the forward runs under torch.autocast in bfloat16, as
flywheel's learner runs it; times are taken between torch.cuda.synchronize() calls.

Prints one JSON object, with `first_step` = loss and pre-clip gradient norm of the first step
(taken on the loaded weights, before the optimiser changes them), which the benchmark compares
with flywheel's first step on the same weights and batch.

usage: learner_python.py --weights W.safetensors --batch B.safetensors --spec SPEC.json
                         [--attention documents|dense|sdpa]
SPEC: {"model": {...}, "micro_batches": [{"rows", "length", "doc_lengths"}], "steps": N,
       "threads": T, "lr", "is_cap", "grad_clip", "betas", "eps", "weight_decay",
       "device": "cpu", "dtype": "float32"}
model: hidden_size, num_layers, num_heads, num_kv_heads, head_dim, rope_theta, rms_norm_eps,
       qk_norm (Qwen3's per-head q/k RMS norms before the rotation)
B: mb{i}.{tokens,targets,trainable,behaviour,advantages,loss_weights} as float32 [rows, L].
"""
import argparse
import contextlib
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


def packed_positions(doc_lengths, length):
    """positions [B, L]: restarting at 0 per document, 0 on padding (flywheel's PackedLayout)."""
    positions = torch.zeros(len(doc_lengths), length, dtype=torch.int64)
    for r, docs in enumerate(doc_lengths):
        start = 0
        for n in docs:
            positions[r, start:start + n] = torch.arange(n)
            start += n
    return positions


def dense_bias(doc_lengths, length):
    """additive bias [B, 1, 1, L, L]: block-diagonal causal per document, padding attends to
    itself only."""
    rows = len(doc_lengths)
    doc = torch.full((rows, length), -1, dtype=torch.int64)
    for r, docs in enumerate(doc_lengths):
        start = 0
        for d, n in enumerate(docs):
            doc[r, start:start + n] = d
            start += n
        doc[r, start:] = torch.arange(length - start) + 1000000  # each pad its own document
    same = doc[:, :, None] == doc[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    bias = torch.zeros(rows, length, length).masked_fill(~(same & causal), float("-inf"))
    return bias[:, None, None]


class Model:
    def __init__(self, cfg, w, attention):
        self.h = cfg["num_heads"]
        self.kvh = cfg["num_kv_heads"]
        self.d = cfg.get("head_dim") or cfg["hidden_size"] // self.h
        self.layers = cfg["num_layers"]
        self.eps = cfg["rms_norm_eps"]
        self.attention = attention
        self.device = w["model.embed_tokens.weight"].device  # where the weights were loaded
        self.inv_freq = cfg["rope_theta"] ** (
            -torch.arange(0, self.d, 2, dtype=torch.float32, device=self.device) / self.d)
        # Fused training parameters, built once: qkv = [q; k; v], gate_up = [gate; up].
        self.p = {"embed": w.pop("model.embed_tokens.weight"), "norm": w.pop("model.norm.weight")}
        if "lm_head.weight" in w:
            self.p["head"] = w.pop("lm_head.weight")
        for i in range(self.layers):
            p = f"model.layers.{i}."
            take = lambda *names: torch.cat([w.pop(p + n + ".weight") for n in names], 0)
            self.p[f"{i}.ln1"] = w.pop(p + "input_layernorm.weight")
            self.p[f"{i}.qkv"] = take("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
            if cfg.get("qk_norm"):
                self.p[f"{i}.q_norm"] = w.pop(p + "self_attn.q_norm.weight")
                self.p[f"{i}.k_norm"] = w.pop(p + "self_attn.k_norm.weight")
            self.p[f"{i}.o"] = w.pop(p + "self_attn.o_proj.weight")
            self.p[f"{i}.ln2"] = w.pop(p + "post_attention_layernorm.weight")
            self.p[f"{i}.gate_up"] = take("mlp.gate_proj", "mlp.up_proj")
            self.p[f"{i}.down"] = w.pop(p + "mlp.down_proj.weight")
        # A weight the peer does not use would drop out of its gradient norm unnoticed.
        assert not w, f"weights the peer does not model: {sorted(w)}"
        for t in self.p.values():
            t.requires_grad_(True)
        self.masks = {}

    def parameters(self):
        return list(self.p.values())

    def rms(self, x, weight):
        """In float32 whatever x's dtype, as flywheel's RmsNorm (and HF Llama) computes it."""
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    @staticmethod
    def apply_rope(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def causal_mask(self, n, groups):
        """[groups * n, n] additive causal mask, one per document length (cached)."""
        key = (n, groups)
        if key not in self.masks:
            self.masks[key] = torch.full((n, n), float("-inf"), device=self.device) \
                .triu(1).repeat(groups, 1)
        return self.masks[key]

    def document_attention(self, q, k, v, doc_lengths):
        """q [B, L, H, D], k and v [B, L, KVH, D] → [B, L, H·D]: causal within each document.
        Query head j·g + i reads kv head j (HF repeat_kv order), folded into the query rows."""
        b, l, h, d = q.shape
        kvh, g = self.kvh, self.h // self.kvh
        qf, kf, vf = q.reshape(b * l, h, d), k.reshape(b * l, kvh, d), v.reshape(b * l, kvh, d)
        scale = 1.0 / math.sqrt(d)
        pieces = []
        for r, docs in enumerate(doc_lengths):
            off = r * l
            for n in docs:
                qd = qf[off:off + n].view(n, kvh, g, d).permute(1, 2, 0, 3).reshape(kvh, g * n, d)
                kd = kf[off:off + n].permute(1, 2, 0)  # [KVH, D, n]
                vd = vf[off:off + n].transpose(0, 1)  # [KVH, n, D]
                scores = torch.baddbmm(self.causal_mask(n, g), qd, kd, alpha=scale)
                out = torch.bmm(torch.softmax(scores, -1), vd)  # [KVH, g·n, D]
                pieces.append(out.view(kvh, g, n, d).permute(2, 0, 1, 3).reshape(n, h * d))
                off += n
            pad = (r + 1) * l - off
            if pad > 0:  # padding sees only itself: its output is its value vector
                pieces.append(vf[off:off + pad].unsqueeze(2).expand(pad, kvh, g, d)
                              .reshape(pad, h * d))
        return torch.cat(pieces, 0).view(b, l, h * d)

    def sdpa_attention(self, q, k, v, doc_lengths):
        """The documents loop with one fused causal attention per document (flash on CUDA)."""
        b, l, h, d = q.shape
        kvh = self.kvh
        qf, kf, vf = q.reshape(b * l, h, d), k.reshape(b * l, kvh, d), v.reshape(b * l, kvh, d)
        pieces = []
        for r, docs in enumerate(doc_lengths):
            off = r * l
            for n in docs:
                qd = qf[off:off + n].transpose(0, 1)[None]  # [1, H, n, D]
                kd = kf[off:off + n].transpose(0, 1)[None]  # [1, KVH, n, D]
                vd = vf[off:off + n].transpose(0, 1)[None]
                out = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, enable_gqa=True)
                pieces.append(out[0].transpose(0, 1).reshape(n, h * d))
                off += n
            pad = (r + 1) * l - off
            if pad > 0:
                pieces.append(vf[off:off + pad].unsqueeze(2).expand(pad, kvh, h // kvh, d)
                              .reshape(pad, h * d))
        return torch.cat(pieces, 0).view(b, l, h * d)

    def dense_attention(self, q, k, v, bias):
        b, l, h, d = q.shape
        g = self.h // self.kvh
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        qg = q.reshape(b, self.kvh, g * l, d)
        scores = (qg @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.view(b, self.kvh, g, l, l) + bias
        probs = torch.softmax(scores, -1).view(b, self.kvh, g * l, l)
        return (probs @ v).view(b, self.h, l, d).transpose(1, 2).reshape(b, l, -1)

    def forward(self, tokens, doc_lengths):
        p = self.p
        b, l = tokens.shape
        positions = packed_positions(doc_lengths, l).to(self.device)
        bias = dense_bias(doc_lengths, l).to(self.device) if self.attention == "dense" else None
        x = p["embed"][tokens]
        ang = positions.to(torch.float32)[..., None] * self.inv_freq
        emb = torch.cat([ang, ang], -1)[:, :, None]  # [B, L, 1, D]: token-major
        cos, sin = emb.cos(), emb.sin()
        qw, kvw = self.h * self.d, self.kvh * self.d
        for i in range(self.layers):
            hx = self.rms(x, p[f"{i}.ln1"])
            qkv = F.linear(hx, p[f"{i}.qkv"])
            q = qkv[..., :qw].view(b, l, self.h, self.d)
            k = qkv[..., qw:qw + kvw].view(b, l, self.kvh, self.d)
            if f"{i}.q_norm" in p:  # Qwen3: each head normalised on its own, before the rotation
                q, k = self.rms(q, p[f"{i}.q_norm"]), self.rms(k, p[f"{i}.k_norm"])
            q, k = self.apply_rope(q, cos, sin), self.apply_rope(k, cos, sin)
            v = qkv[..., qw + kvw:].view(b, l, self.kvh, self.d)
            if bias is not None:
                att = self.dense_attention(q, k, v, bias)
            elif self.attention == "sdpa":
                att = self.sdpa_attention(q, k, v, doc_lengths)
            else:
                att = self.document_attention(q, k, v, doc_lengths)
            x = x + F.linear(att, p[f"{i}.o"])
            gate_up = F.linear(self.rms(x, p[f"{i}.ln2"]), p[f"{i}.gate_up"])
            gate, up = gate_up.chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, p[f"{i}.down"])
        return F.linear(self.rms(x, p["norm"]), p.get("head", p["embed"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--attention", choices=["documents", "dense", "sdpa"], default="documents")
    args = ap.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    torch.set_num_threads(spec["threads"])
    device = torch.device(spec.get("device", "cpu"))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[spec.get("dtype", "float32")]
    weights = {name: t.to(device) for name, t in read_safetensors(args.weights).items()}
    model = Model(spec["model"], weights, args.attention)
    params = model.parameters()
    opt = torch.optim.AdamW(params, lr=spec["lr"], betas=tuple(spec["betas"]), eps=spec["eps"],
                            weight_decay=spec["weight_decay"])
    data = {name: t.to(device) for name, t in read_safetensors(args.batch).items()}
    mbs = []
    for i, mb in enumerate(spec["micro_batches"]):
        get = lambda key: data[f"mb{i}.{key}"]
        mbs.append({"tokens": get("tokens").long(), "targets": get("targets").long(),
                    "trainable": get("trainable") > 0.5, "behaviour": get("behaviour"),
                    "advantages": get("advantages"), "loss_weights": get("loss_weights"),
                    "doc_lengths": mb["doc_lengths"]})
    cap = spec["is_cap"]

    # float32: no autocast at all (the CPU peer's exact arithmetic); bfloat16: autocast.
    def autocast():
        if dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=dtype)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for mb in mbs:
            with autocast():
                logits = model.forward(mb["tokens"], mb["doc_lengths"])
            logp = torch.log_softmax(logits.float(), -1).gather(-1, mb["targets"][..., None])[..., 0]
            weight = (logp.detach() - mb["behaviour"]).exp().clamp_max(cap)
            term = -weight * mb["advantages"] * logp
            loss = (mb["loss_weights"] * torch.where(mb["trainable"], term, 0.0)).sum()
            loss.backward()
            total += loss.item()
        if spec["grad_clip"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, spec["grad_clip"])
        else:
            norm = torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(t.grad) for t in params if t.grad is not None]))
        opt.step()
        return total, norm.item()

    first_loss, first_norm = step()  # warm-up, on the loaded weights
    losses = []
    sync()
    start = time.perf_counter()
    for _ in range(spec["steps"]):
        losses.append(step()[0])
    sync()
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "steps": spec["steps"], "losses": losses,
                      "first_step": {"loss": first_loss, "grad_norm": first_norm},
                      "attention": args.attention, "torch_version": torch.__version__,
                      "device": str(device), "dtype": spec.get("dtype", "float32"),
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
