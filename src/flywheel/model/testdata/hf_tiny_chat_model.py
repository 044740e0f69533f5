#!/usr/bin/env python3
"""A tiny random Qwen3 model directory with a real tokenizer and chat template, for the jobs'
model.path tests (runtime/hf_job_test.sh, cli/export_test.sh).

usage: hf_tiny_chat_model.py OUT_DIR TOKENIZER_DIR

OUT_DIR gets what a Hugging Face Qwen3 repository has: config.json (Qwen3ForCausalLM with
examples/guess.toml's shape, so that `flywheel train examples/guess.toml --set model.path=OUT_DIR`
runs unchanged, and Qwen3's own vocab_size of 151,936: 267 rows past the tokenizer),
generation_config.json (Qwen3-0.6B's: eos <|im_end|> and <|endoftext|>, temperature 0.6, top_p
0.95, top_k 20), model.safetensors (BF16, tied embeddings, random) and TOKENIZER_DIR's
tokenizer.json and tokenizer_config.json (third_party/tokenizers/qwen3 from scripts/setup).
The weights are written by hf_tiny_checkpoints.py's code, with its sizes replaced.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_tiny_checkpoints as tiny  # noqa: E402

# examples/guess.toml's [model]: hidden 64, 2 layers, 4 heads, 2 KV heads, intermediate 172.
tiny.VOCAB = 151936
tiny.HIDDEN = 64
tiny.LAYERS = 2
tiny.INTERMEDIATE = 172
tiny.MAX_POSITIONS = 1024
VARIANT = dict(name="qwen3_chat", arch="Qwen3ForCausalLM", heads=4, kv_heads=2, head_dim=16,
               tied=True, dtype="bfloat16", shards=1, rope_scaling=None)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, tokenizer_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    config = tiny.config_json(VARIANT)
    config.update({"bos_token_id": 151643, "eos_token_id": 151645})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
                   "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                   "transformers_version": "4.51.0"}, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out, name))
    tiny.write_weights(out, tiny.make_weights(VARIANT, seed=7), VARIANT["shards"])


if __name__ == "__main__":
    main()
