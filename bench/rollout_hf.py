#!/usr/bin/env python3
"""Hugging Face transformers peer of `flywheel bench rollout-gpu`.

Loads the Hugging Face directory the bench exported (the engine's weights, in its dtype) with
AutoModelForCausalLM (attn_implementation "sdpa") and answers requests on stdin, one JSON object
per line, so that the model is loaded once while its rounds alternate with the engine's:

  {"id": 3, "batch": 64}   generate for the first 64 prompts; reply in REPLIES/reply-3.json
  {"quit": true}           exit

Each request runs

  model.generate(input_ids, attention_mask, max_new_tokens=N, min_new_tokens=N,
                 do_sample=False, cache_implementation="static", pad_token_id=0)

between two torch.cuda.synchronize() calls. The first request at a batch size is preceded by an
untimed warm-up generate (its seconds are reported as warmup_seconds: with --compile they are
torch.compile's time). With --compile off, generate gets disable_compile=True: on CUDA, generate
with a static cache otherwise compiles its decoding forward by itself (mode "reduce-overhead").

A failure to start (no torch, no transformers, a model that does not load) is written to
REPLIES/error.json as {"error": "..."} and the script exits with status 3, so the bench can say
why the variant was skipped. --fake replaces the model with a stand-in that returns token 0 (no
torch needed): it exercises this protocol where transformers is not installed.
"""

import argparse
import json
import os
import sys
import time
import traceback


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


class FakePeer:
    """Protocol stand-in: every generated token is 0."""

    def __init__(self, spec):
        self.spec = spec

    def generate(self, batch):
        n = self.spec["new_tokens"]
        return [[0] * n for _ in range(batch)]

    def info(self):
        return {"peer": "fake (protocol self-test; no model)"}


class HfPeer:
    def __init__(self, model_dir, spec):
        try:
            import torch
        except ImportError as e:
            raise RuntimeError(f"{sys.executable} cannot import torch ({e})") from None
        try:
            import transformers
        except ImportError as e:
            raise RuntimeError(
                f"{sys.executable} cannot import transformers ({e}); install transformers "
                "for this interpreter or give --param python=INTERPRETER"
            ) from None
        self.torch = torch
        self.transformers_version = transformers.__version__
        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[spec["dtype"]]
        self.device = torch.device(spec["device"])
        kwargs = {"attn_implementation": "sdpa"}
        try:  # transformers >= 4.56 names it dtype; earlier versions torch_dtype
            model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kwargs)
        except TypeError:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                model_dir, torch_dtype=dtype, **kwargs
            )
        self.model = model.to(self.device).eval()
        self.spec = spec
        if spec["device"] == "cpu":
            torch.set_num_threads(int(spec.get("threads", 1)) or 1)

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def generate(self, batch):
        torch = self.torch
        n = self.spec["new_tokens"]
        ids = torch.tensor(self.spec["prompts"][:batch], dtype=torch.long, device=self.device)
        kwargs = dict(
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            cache_implementation="static",
            pad_token_id=0,
        )
        if not self.spec["compile"]:
            kwargs["disable_compile"] = True
        with torch.inference_mode():
            out = self.model.generate(ids, **kwargs)
        return out[:, ids.shape[1] :].tolist()

    def info(self):
        return {
            "peer": "transformers generate, static cache, sdpa"
            + (", torch.compile (generate's own)" if self.spec["compile"] else ", eager"),
            "transformers_version": self.transformers_version,
            "torch_version": self.torch.__version__,
            "device_name": self.torch.cuda.get_device_name(self.device)
            if self.device.type == "cuda"
            else "cpu",
        }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--spec", required=True, help="JSON: prompts, new_tokens, device, dtype, compile")
    p.add_argument("--replies", required=True, help="directory for reply-N.json / error.json")
    p.add_argument("--fake", action="store_true", help="protocol self-test without a model")
    a = p.parse_args()
    with open(a.spec) as f:
        spec = json.load(f)
    try:
        start = time.perf_counter()
        peer = FakePeer(spec) if a.fake else HfPeer(a.model, spec)
        load_seconds = time.perf_counter() - start
    except Exception as e:  # reported to the bench, which names it as the reason for skipping
        write_json(os.path.join(a.replies, "error.json"), {"error": str(e)})
        traceback.print_exc()
        sys.exit(3)

    sync = getattr(peer, "sync", lambda: None)
    warmed = set()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        if req.get("quit"):
            break
        batch = int(req["batch"])
        reply = dict(peer.info(), batch=batch, load_seconds=load_seconds)
        try:
            if batch not in warmed:
                sync()
                start = time.perf_counter()
                peer.generate(batch)
                sync()
                reply["warmup_seconds"] = time.perf_counter() - start
                warmed.add(batch)
            sync()
            start = time.perf_counter()
            tokens = peer.generate(batch)
            sync()
            reply["seconds"] = time.perf_counter() - start
            reply["new_tokens_per_row"] = min(len(t) for t in tokens)
            reply["first_tokens"] = [t[: spec["agree_tokens"]] for t in tokens]
        except Exception as e:
            traceback.print_exc()
            reply = {"error": f"generate at batch {batch}: {e}"}
        write_json(os.path.join(a.replies, f"reply-{req['id']}.json"), reply)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
