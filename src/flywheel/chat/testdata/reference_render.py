#!/usr/bin/env python3
"""Renders chat-template cases with Jinja2 exactly as Hugging Face transformers does.

The environment is transformers' (utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and a `generation` tag that renders its body, its tojson (json.dumps with
ensure_ascii=False), raise_exception and strftime_now; the variables are those of
render_jinja_template: messages, tools, documents, add_generation_prompt, then the tokenizer's
special_tokens_map (only the tokens it sets), then the caller's extra variables.
strftime_now reads a fixed time so that renders are reproducible.

usage: reference_render.py CASES.json OUT.json
  CASES.json: {"now": "2026-01-15T09:30:00", "templates": {"name": "path/tokenizer_config.json"},
               "conversations": [{"messages": [...], "tools": [...] | null}],
               "cases": [{"template": name, "conversation": index,
                          "add_generation_prompt": bool, "variables": {...}}]}
  OUT.json:   [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}] (one per case)
"""
import datetime
import json
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit("reference_render.py needs Jinja2 (Debian's python3-jinja2): run scripts/setup")

SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token"]


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def token_content(token):
    return token["content"] if isinstance(token, dict) else token


def special_tokens_map(config):
    tokens = {}
    for key in SPECIAL_TOKENS:
        if config.get(key) is not None:
            tokens[key] = token_content(config[key])
    if config.get("additional_special_tokens"):
        tokens["additional_special_tokens"] = [token_content(t)
                                               for t in config["additional_special_tokens"]]
    return tokens


def main(argv):
    with open(argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    now = datetime.datetime.fromisoformat(spec["now"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    templates = {}
    for name, path in spec["templates"].items():
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        source = config["chat_template"]
        if isinstance(source, list):
            source = {t["name"]: t["template"] for t in source}["default"]
        templates[name] = (env.from_string(source), special_tokens_map(config))

    out = []
    for case in spec["cases"]:
        template, tokens = templates[case["template"]]
        conversation = spec["conversations"][case["conversation"]]
        variables = {**tokens, **case.get("variables", {})}
        try:
            text = template.render(messages=conversation["messages"],
                                   tools=conversation.get("tools"),
                                   documents=None,
                                   add_generation_prompt=case.get("add_generation_prompt", False),
                                   **variables)
            out.append({"ok": True, "text": text})
        except Exception as e:  # every failure is compared as "both failed"
            out.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
