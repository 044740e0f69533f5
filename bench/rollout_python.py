#!/usr/bin/python3
"""Peer of `flywheel bench rollout`: the same Llama-style model in PyTorch with its own
preallocated KV cache, generating from the same prompts and weights, in one of two variants:

  traced  (`python`, the strongest peer): q/k/v and gate/up weights concatenated once at load (one
          GEMM each instead of three and two), RoPE cos/sin tabulated for every position once (one
          row indexed per step), the per-token decode step traced with torch.jit.trace
          (TorchScript runs the graph without the Python interpreter between ops), and tokens
          drawn by inverse CDF. The prompt's prefill runs the same fused code eagerly (it is one
          call per generation).
  eager   (`python_eager`): the plain eager implementation, as HF Llama writes the model.

Run by the benchmark with Debian's /usr/bin/python3 (python3-torch). Fair setup: weights loaded
from the benchmark's safetensors file, no autograd, the same thread count, a KV cache written in
place (no torch.cat per step), grouped-query attention without copying keys. Prints one JSON
object on stdout.

usage: rollout_python.py --weights W.safetensors --spec SPEC.json
SPEC: {"model": {...ModelOptions...}, "prompts": [[ids]], "new_tokens": N, "threads": T,
       "greedy_check_tokens": K, "variant": "traced" | "eager"}
"""
import argparse
import json
import math
import struct
import time
import warnings

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        buf = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(buf, dtype=dtypes[entry["dtype"]]) if end > begin else torch.empty(0)
        out[name] = t.reshape(entry["shape"]).to(torch.float32)
    return out


class EagerModel:
    """The plain eager peer (`python_eager`): separate q/k/v and gate/up projections as HF Llama
    writes them, RoPE angles recomputed at every step."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.w = w
        self.h = cfg["num_heads"]
        self.kvh = cfg["num_kv_heads"]
        self.d = cfg["hidden_size"] // self.h
        self.layers = cfg["num_layers"]
        self.eps = cfg["rms_norm_eps"]
        inv = cfg["rope_theta"] ** (-torch.arange(0, self.d, 2, dtype=torch.float32) / self.d)
        self.inv_freq = inv
        self.head = w.get("lm_head.weight", w["model.embed_tokens.weight"])

    def rms(self, x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, positions):
        ang = positions.to(torch.float32)[..., None] * self.inv_freq
        emb = torch.cat([ang, ang], -1)[:, None]  # [B, 1, L, D]
        return emb.cos(), emb.sin()

    @staticmethod
    def apply_rope(x, cos, sin):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def forward(self, tokens, start, cache):
        """tokens [B, L] at positions start..start+L-1; cache: per layer (k, v) preallocated."""
        w = self.w
        b, l = tokens.shape
        x = w["model.embed_tokens.weight"][tokens]
        positions = torch.arange(start, start + l)[None].expand(b, l)
        cos, sin = self.rope(positions)
        total = start + l
        mask = None
        if l > 1:
            mask = torch.full((l, total), float("-inf")).triu(start + 1)
        g = self.h // self.kvh
        for i in range(self.layers):
            p = f"model.layers.{i}."
            hx = self.rms(x, w[p + "input_layernorm.weight"])
            q = torch.nn.functional.linear(hx, w[p + "self_attn.q_proj.weight"])
            k = torch.nn.functional.linear(hx, w[p + "self_attn.k_proj.weight"])
            v = torch.nn.functional.linear(hx, w[p + "self_attn.v_proj.weight"])
            q = q.view(b, l, self.h, self.d).transpose(1, 2)
            k = k.view(b, l, self.kvh, self.d).transpose(1, 2)
            v = v.view(b, l, self.kvh, self.d).transpose(1, 2)
            q = self.apply_rope(q, cos, sin)
            k = self.apply_rope(k, cos, sin)
            kc, vc = cache[i]
            kc[:, :, start:total] = k
            vc[:, :, start:total] = v
            keys, values = kc[:, :, :total], vc[:, :, :total]
            qg = q.reshape(b, self.kvh, g * l, self.d)
            scores = (qg @ keys.transpose(-1, -2)) / math.sqrt(self.d)
            if mask is not None:
                scores = scores.view(b, self.kvh, g, l, total) + mask
            probs = torch.softmax(scores, -1).view(b, self.kvh, g * l, total)
            att = (probs @ values).view(b, self.h, l, self.d).transpose(1, 2).reshape(b, l, -1)
            x = x + torch.nn.functional.linear(att, w[p + "self_attn.o_proj.weight"])
            hx = self.rms(x, w[p + "post_attention_layernorm.weight"])
            gate = torch.nn.functional.linear(hx, w[p + "mlp.gate_proj.weight"])
            up = torch.nn.functional.linear(hx, w[p + "mlp.up_proj.weight"])
            x = x + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up,
                                               w[p + "mlp.down_proj.weight"])
        x = self.rms(x[:, -1], w["model.norm.weight"])
        return torch.nn.functional.linear(x, self.head)  # [B, V] logits of the last position

    def new_cache(self, b, length):
        return [(torch.zeros(b, self.kvh, length, self.d), torch.zeros(b, self.kvh, length, self.d))
                for _ in range(self.layers)]

    def generate(self, prompts, new_tokens, greedy=False, seed=0):
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.tensor(prompts, dtype=torch.int64)
        b, l = tokens.shape
        cache = self.new_cache(b, l + new_tokens)
        logits = self.forward(tokens, 0, cache)
        out, logprobs = [], []
        pos = l
        for step in range(new_tokens):
            lp = torch.log_softmax(logits, -1)
            if greedy:
                nxt = lp.argmax(-1, keepdim=True)
            else:
                nxt = torch.multinomial(lp.exp(), 1, generator=gen)
            logprobs.append(lp.gather(-1, nxt))
            out.append(nxt)
            if step + 1 < new_tokens:
                logits = self.forward(nxt, pos, cache)
                pos += 1
        return torch.cat(out, 1), torch.cat(logprobs, 1)



class FusedModel:
    """The traced peer. Caches are two tensors [layers, B, kv_heads, length, head_dim] (K and V), so
    the traced step takes a fixed number of inputs whatever the depth."""

    def __init__(self, cfg, w, max_len):
        self.h = cfg["num_heads"]
        self.kvh = cfg["num_kv_heads"]
        self.d = cfg["hidden_size"] // self.h
        self.layers = cfg["num_layers"]
        self.eps = cfg["rms_norm_eps"]
        self.embed = w["model.embed_tokens.weight"]
        self.final_norm = w["model.norm.weight"]
        self.head = w.get("lm_head.weight", self.embed)
        self.blocks = []
        for i in range(self.layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            self.blocks.append({
                "ln1": w[p + "input_layernorm.weight"],
                "qkv": torch.cat([w[a + "q_proj.weight"], w[a + "k_proj.weight"],
                                  w[a + "v_proj.weight"]]).contiguous(),
                "o": w[a + "o_proj.weight"],
                "ln2": w[p + "post_attention_layernorm.weight"],
                "gate_up": torch.cat([w[m + "gate_proj.weight"],
                                      w[m + "up_proj.weight"]]).contiguous(),
                "down": w[m + "down_proj.weight"],
            })
        inv = cfg["rope_theta"] ** (-torch.arange(0, self.d, 2, dtype=torch.float32) / self.d)
        ang = torch.arange(max_len, dtype=torch.float32)[:, None] * inv
        emb = torch.cat([ang, ang], -1)  # [max_len, D], the eager peer's angles row by row
        self.cos, self.sin = emb.cos(), emb.sin()
        self.step = None  # the traced decode step, after trace_step()

    def rms(self, x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    @staticmethod
    def apply_rope(x, cos, sin):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def forward(self, tokens, cos, sin, k_cache, v_cache):
        """tokens [B, L] at positions total-L .. total-1, where total = cos.size(0): cos and sin are
        the table's first `total` rows. The position comes from an input's shape rather than a
        Python int so that the traced step reads it at every call (a traced int is a constant)."""
        b, l = tokens.shape
        total = cos.size(0)
        start = total - l
        cos, sin = cos[start:], sin[start:]  # [L, D], broadcast over [B, heads, L, D]
        x = torch.nn.functional.embedding(tokens, self.embed)
        mask = None
        if l > 1:  # the prefill only; the traced step has l == 1
            mask = torch.full((l, total), float("-inf")).triu(start + 1)
        g = self.h // self.kvh
        qd, kvd = self.h * self.d, self.kvh * self.d
        for i, blk in enumerate(self.blocks):
            hx = self.rms(x, blk["ln1"])
            q, k, v = torch.nn.functional.linear(hx, blk["qkv"]).split([qd, kvd, kvd], -1)
            q = self.apply_rope(q.view(b, l, self.h, self.d).transpose(1, 2), cos, sin)
            k = self.apply_rope(k.view(b, l, self.kvh, self.d).transpose(1, 2), cos, sin)
            v = v.view(b, l, self.kvh, self.d).transpose(1, 2)
            kc, vc = k_cache[i], v_cache[i]
            kc[:, :, start:total] = k
            vc[:, :, start:total] = v
            keys, values = kc[:, :, :total], vc[:, :, :total]
            qg = q.reshape(b, self.kvh, g * l, self.d)
            scores = (qg @ keys.transpose(-1, -2)) * (1.0 / math.sqrt(self.d))
            if mask is not None:
                scores = scores.view(b, self.kvh, g, l, total) + mask
            probs = torch.softmax(scores, -1).view(b, self.kvh, g * l, total)
            att = (probs @ values).view(b, self.h, l, self.d).transpose(1, 2).reshape(b, l, qd)
            x = x + torch.nn.functional.linear(att, blk["o"])
            hx = self.rms(x, blk["ln2"])
            gate, up = torch.nn.functional.linear(hx, blk["gate_up"]).chunk(2, -1)
            x = x + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, blk["down"])
        x = self.rms(x[:, -1], self.final_norm)
        return torch.nn.functional.linear(x, self.head)  # [B, V] logits of the last position

    def new_cache(self, b, length):
        shape = (self.layers, b, self.kvh, length, self.d)
        return torch.zeros(shape), torch.zeros(shape)

    def trace_step(self, b, length):
        """Traces the decode step for batch b on a scratch cache of `length` positions: the graph
        writes the cache it is given in place and returns the logits."""
        k_cache, v_cache = self.new_cache(b, length)
        example = (torch.zeros(b, 1, dtype=torch.int64), self.cos[:2], self.sin[:2], k_cache,
                   v_cache)
        with warnings.catch_warnings():
            # The tracer warns that `l > 1` becomes a constant: it is meant to, the step is l == 1.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            self.step = torch.jit.trace(self.forward, example, check_trace=False)

    def generate(self, prompts, new_tokens, greedy=False, seed=0, traced=True):
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.tensor(prompts, dtype=torch.int64)
        b, l = tokens.shape
        k_cache, v_cache = self.new_cache(b, l + new_tokens)
        logits = self.forward(tokens, self.cos[:l], self.sin[:l], k_cache, v_cache)
        step = self.step if traced else self.forward
        out, logprobs = [], []
        pos = l
        for i in range(new_tokens):
            lp = torch.log_softmax(logits, -1)
            if greedy:
                nxt = lp.argmax(-1, keepdim=True)
            else:
                # An inverse-CDF draw, as the engine's sampler makes: torch.multinomial draws an
                # exponential per vocabulary entry and took 185 us a step at batch 32, vocab 512,
                # this 26 us.
                cdf = lp.exp().cumsum(-1)
                u = torch.rand(b, 1, generator=gen) * cdf[:, -1:]
                nxt = torch.searchsorted(cdf, u).clamp_(max=cdf.size(1) - 1)
            logprobs.append(lp.gather(-1, nxt))
            out.append(nxt)
            if i + 1 < new_tokens:
                pos += 1
                logits = step(nxt, self.cos[:pos], self.sin[:pos], k_cache, v_cache)
        return torch.cat(out, 1), torch.cat(logprobs, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--spec", required=True)
    args = ap.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    torch.set_num_threads(spec["threads"])
    variant = spec.get("variant", "traced")
    prompts = spec["prompts"]
    check = spec.get("greedy_check_tokens", 0)
    max_len = len(prompts[0]) + max(spec["new_tokens"], check, 4)
    extra = {}
    # No autograd on either side. The eager peer runs under inference_mode; the traced one under
    # no_grad, since a graph traced or run on inference tensors is refused by TorchScript in 1.13.
    with torch.inference_mode() if variant == "eager" else torch.no_grad():
        weights = read_safetensors(args.weights)
        if variant == "eager":
            model = EagerModel(spec["model"], weights)
        elif variant == "traced":
            model = FusedModel(spec["model"], weights, max_len)
            model.trace_step(len(prompts), max_len)
        else:
            raise SystemExit(f"unknown variant {variant!r} (traced | eager)")
        greedy = model.generate(prompts[:2], check, greedy=True)[0].tolist() if check else []
        if variant == "traced" and check:
            # The traced step must decode as the same fused code run eagerly does.
            eager_greedy = model.generate(prompts[:2], check, greedy=True, traced=False)[0].tolist()
            extra["traced_matches_eager"] = eager_greedy == greedy
        # Warm-up: TorchScript's profiling executor optimises a graph after its first runs.
        model.generate(prompts, 4)
        start, cpu_start = time.perf_counter(), time.process_time()
        tokens, _ = model.generate(prompts, spec["new_tokens"], seed=1)
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
    print(json.dumps({
        "variant": variant,
        "tokens_per_s": tokens.numel() / seconds,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "generated_tokens": tokens.numel(),
        "greedy_tokens": greedy,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        **extra,
    }))


if __name__ == "__main__":
    main()
