#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for flywheel's hf_logits_check (GPU machine).

For each architecture below (Qwen3-0.6B's and Llama-3.2-1B's shapes, random weights), writes
OUT/<name>/ with save_pretrained (float32 safetensors) and, per dtype, OUT/<name>-<dtype>.reference.json
({"tokens", "dtype", "logits"}) computed by transformers on the GPU: float32 with TF32 off, and
bfloat16 with the weights cast as `model.to(torch.bfloat16)` casts them (flywheel's snapshot
rounds its float32 master weights the same way); the bfloat16 one also has "vs_float32",
transformers' own largest error against its float32 logits (what bfloat16 costs it). A symlink
OUT/<name>-<dtype> -> <name> gives hf_logits_check the DIR / DIR.reference.json pair it reads.

  python3 scripts/gpu/hf_parity.py OUT_DIR [--tokens 16] [--small]

--small uses a few-million-parameter version of each shape (for a quick check of the script).
"""
import argparse
import json
import os

import torch
import transformers


def configs(small):
    qwen3 = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                 hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, attention_bias=False, hidden_act="silu",
                 use_sliding_window=False, sliding_window=None, max_window_layers=28)
    llama = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
                 hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                 max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                 tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
                 hidden_act="silu",
                 rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                   high_freq_factor=4.0, original_max_position_embeddings=8192))
    if small:
        for c in (qwen3, llama):
            c.update(vocab_size=1024, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=32)
        qwen3["max_window_layers"] = 2
    return {"qwen3": qwen3, "llama": llama}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.out, exist_ok=True)
    for name, fields in configs(args.small).items():
        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(**fields)
        # float32 master weights whatever the version's default dtype (torch_dtype / dtype).
        model = transformers.AutoModelForCausalLM.from_config(config).float()
        model.eval()
        directory = os.path.join(args.out, name)
        model.save_pretrained(directory)  # safetensors: the default since 4.35, the only format in 5
        tokens = torch.randint(0, fields["vocab_size"], (1, args.tokens))
        exact = None  # the float32 logits: how far transformers' own bfloat16 lands from them
        for dtype in ("float32", "bfloat16"):
            m = model.to(device=device, dtype=getattr(torch, dtype))
            with torch.no_grad():
                logits = m(tokens.to(device)).logits[0].float().cpu()
            reference = {"tokens": tokens[0].tolist(), "dtype": dtype, "logits": logits.tolist()}
            if exact is None:
                exact = logits
            else:
                reference["vs_float32"] = (logits - exact).abs().max().item()
                print(f"{name} {dtype}: transformers' own max |error| against its float32 "
                      f"logits {reference['vs_float32']:.4f}", flush=True)
            with open(os.path.join(args.out, f"{name}-{dtype}.reference.json"), "w") as f:
                json.dump(reference, f)
            link = os.path.join(args.out, f"{name}-{dtype}")
            if not os.path.lexists(link):
                os.symlink(name, link)
            print(f"{name} {dtype}: {sum(p.numel() for p in model.parameters())} parameters, "
                  f"max |logit| {logits.abs().max().item():.4f}", flush=True)
        model.to("cpu", torch.float32)


if __name__ == "__main__":
    main()
