#!/usr/bin/env python3
"""Tiny Hugging Face model directories with reference logits, for flywheel's hf_model_test.

usage: hf_tiny_checkpoints.py OUT_DIR

For each variant below it writes OUT_DIR/<name>/ as transformers' save_pretrained lays a model
out (config.json, generation_config.json, model.safetensors or model-0000i-of-0000N.safetensors
shards with model.safetensors.index.json, and placeholder tokenizer files), and
OUT_DIR/<name>.reference.json: {"tokens": [...], "logits": [[...] per position]}.

The reference forward below is written from the semantics of transformers' modelling code
(modeling_llama.py, modeling_qwen2.py, modeling_qwen3.py and modeling_rope_utils.py's default
and llama3 inverse frequencies), not from flywheel's: eager float64 maths over the weights as
stored, so for a BF16 checkpoint it is the float32 value of the BF16-rounded weights that the
reference (and a float32 flywheel model loading the file) computes with. Needs torch only
(transformers and safetensors are not used: the files are written by hand here, which is the
format's whole specification: u64 header length, JSON header, raw little-endian data).
"""
import json
import math
import os
import struct
import sys

import torch

VOCAB = 64
HIDDEN = 32
LAYERS = 2
INTERMEDIATE = 48
MAX_POSITIONS = 256
SEQUENCE = 12  # tokens of the reference sequence

# Llama 3.1's rope scaling, with a small original context so that all three bands (kept,
# interpolated, divided) occur among head_dim 8's four frequencies at theta 10000.
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

VARIANTS = [
    # name, architecture, heads, kv heads, head_dim (None: hidden / heads), tied, dtype, shards
    dict(name="llama_gqa_f32", arch="LlamaForCausalLM", heads=4, kv_heads=2, head_dim=None,
         tied=False, dtype="float32", shards=1, rope_scaling=LLAMA3_SCALING),
    dict(name="llama_tied_bf16_sharded", arch="LlamaForCausalLM", heads=4, kv_heads=1,
         head_dim=None, tied=True, dtype="bfloat16", shards=2, rope_scaling=LLAMA3_SCALING),
    dict(name="qwen2_f32_sharded", arch="Qwen2ForCausalLM", heads=4, kv_heads=2, head_dim=None,
         tied=False, dtype="float32", shards=3, rope_scaling=None),
    dict(name="qwen2_tied_bf16", arch="Qwen2ForCausalLM", heads=4, kv_heads=2, head_dim=None,
         tied=True, dtype="bfloat16", shards=1, rope_scaling=None),
    dict(name="qwen3_tied_bf16", arch="Qwen3ForCausalLM", heads=4, kv_heads=2, head_dim=16,
         tied=True, dtype="bfloat16", shards=1, rope_scaling=None),
    dict(name="qwen3_untied_f32_sharded", arch="Qwen3ForCausalLM", heads=4, kv_heads=2,
         head_dim=16, tied=False, dtype="float32", shards=2, rope_scaling=None),
]

MODEL_TYPES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
               "Qwen3ForCausalLM": "qwen3"}


def config_json(v):
    model_type = MODEL_TYPES[v["arch"]]
    c = {
        "architectures": [v["arch"]],
        "model_type": model_type,
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": v["heads"],
        "num_key_value_heads": v["kv_heads"],
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": v["rope_scaling"],
        "tie_word_embeddings": v["tied"],
        "torch_dtype": v["dtype"],
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "transformers_version": "4.51.0",
    }
    if model_type == "llama":
        c.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
                  "head_dim": HIDDEN // v["heads"]})
    if model_type == "qwen2":  # no attention_bias key: Qwen2 always has q/k/v biases
        c.update({"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2})
    if model_type == "qwen3":
        c.update({"attention_bias": False, "head_dim": v["head_dim"], "use_sliding_window": False,
                  "sliding_window": None, "max_window_layers": 2,
                  "layer_types": ["full_attention"] * LAYERS})
    return c


def make_weights(v, seed):
    """Named weights in Hugging Face order, in the checkpoint's dtype. Scales give logits of
    order one and attention far from uniform, so that every part of the model shows in them."""
    g = torch.Generator().manual_seed(seed)
    model_type = MODEL_TYPES[v["arch"]]
    d = v["head_dim"] or HIDDEN // v["heads"]
    q_width, kv_width = v["heads"] * d, v["kv_heads"] * d

    def normal(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std

    def norm(n):
        return 1.0 + normal(n, std=0.2)

    w = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN, std=1.0)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = norm(HIDDEN)
        for proj, out, std in (("q", q_width, 1.5), ("k", kv_width, 1.5), ("v", kv_width, 1.0)):
            w[p + f"self_attn.{proj}_proj.weight"] = normal(out, HIDDEN, std=std / math.sqrt(HIDDEN))
            if model_type == "qwen2":
                w[p + f"self_attn.{proj}_proj.bias"] = normal(out, std=0.3)
        w[p + "self_attn.o_proj.weight"] = normal(HIDDEN, q_width, std=1.0 / math.sqrt(q_width))
        if model_type == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(d)
            w[p + "self_attn.k_norm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(HIDDEN)
        w[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN, std=1.0 / math.sqrt(HIDDEN))
        w[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN, std=1.0 / math.sqrt(HIDDEN))
        w[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE,
                                               std=1.0 / math.sqrt(INTERMEDIATE))
    w["model.norm.weight"] = norm(HIDDEN)
    if not v["tied"]:
        w["lm_head.weight"] = normal(VOCAB, HIDDEN, std=1.0 / math.sqrt(HIDDEN))
    dtype = torch.bfloat16 if v["dtype"] == "bfloat16" else torch.float32
    return {name: t.to(dtype) for name, t in w.items()}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return "BF16", t.view(torch.int16).numpy().tobytes()
    assert t.dtype == torch.float32
    return "F32", t.numpy().tobytes()


def write_safetensors(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        dtype, data = tensor_bytes(t)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    return offset


def write_weights(directory, weights, shards):
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), weights)
        return
    names = list(weights)
    per_shard = math.ceil(len(names) / shards)
    weight_map = {}
    total = 0
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[i * per_shard:(i + 1) * per_shard]}
        total += write_safetensors(os.path.join(directory, file), part)
        weight_map.update({n: file for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# ---- the reference forward (transformers' semantics, float64) ----

def inverse_frequencies(config, head_dim):
    # modeling_rope_utils._compute_default_rope_parameters, in float32 as there.
    base = config["rope_theta"]
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv_freq
    assert scaling["rope_type"] == "llama3"
    # modeling_rope_utils._compute_llama3_parameters.
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_logits(config, weights, tokens):
    w = {name: t.double() for name, t in weights.items()}
    model_type = config["model_type"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim") or config["hidden_size"] // heads
    eps = config["rms_norm_eps"]
    n = len(tokens)
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    angles = torch.arange(n, dtype=torch.float64)[:, None] * inverse_frequencies(config, d).double()
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [n, d]
    causal = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def project(name):
            y = h @ w[p + f"self_attn.{name}.weight"].T
            bias = w.get(p + f"self_attn.{name}.bias")
            return y if bias is None else y + bias

        q = project("q_proj").view(n, heads, d)
        k = project("k_proj").view(n, kv_heads, d)
        v = project("v_proj").view(n, kv_heads, d)
        if model_type == "qwen3":  # Qwen3Attention: q_norm / k_norm per head, before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, n, d]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # repeat_kv: kv head j serves query heads j * groups ... (j + 1) * groups - 1.
        groups = heads // kv_heads
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
        scores = q @ k.transpose(1, 2) / math.sqrt(d) + causal
        attn = torch.softmax(scores, dim=-1) @ v  # [heads, n, d]
        x = x + attn.transpose(0, 1).reshape(n, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    for seed, v in enumerate(VARIANTS, start=1):
        directory = os.path.join(out, v["name"])
        os.makedirs(directory, exist_ok=True)
        config = config_json(v)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        with open(os.path.join(directory, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 0, "eos_token_id": [1, 2], "do_sample": True,
                       "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                       "repetition_penalty": 1.05, "transformers_version": "4.51.0"}, f, indent=2)
        # Placeholders: export copies tokenizer files byte for byte; nothing parses them here.
        for name in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(directory, name), "w") as f:
                json.dump({"placeholder": name, "variant": v["name"]}, f)
        weights = make_weights(v, seed)
        write_weights(directory, weights, v["shards"])
        g = torch.Generator().manual_seed(100 + seed)
        tokens = torch.randint(0, VOCAB, (SEQUENCE,), generator=g).tolist()
        logits = reference_logits(config, weights, tokens)
        with open(os.path.join(out, v["name"] + ".reference.json"), "w") as f:
            json.dump({"tokens": tokens, "dtype": v["dtype"], "logits": logits.tolist()}, f)
    print(" ".join(v["name"] for v in VARIANTS))


if __name__ == "__main__":
    main()
