#!/usr/bin/env python3
"""Writes reference_cases.json: the conversations chat_reference_test renders with Jinja2 and
with flywheel's renderer. Each base conversation is rendered with add_generation_prompt true and
false, and for Qwen3 also with enable_thinking absent, true and false.

usage: make_reference_cases.py > reference_cases.json
"""
import json

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city. Températures in °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 16, "default": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web\nand return the top results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "threshold": {"type": "number", "default": 0.5, "minimum": 1e-05},
                "filters": {"type": "object", "properties": {
                    "site": {"type": ["string", "null"]}, "safe": {"type": "boolean", "default": True}}},
                "limit": {"type": "integer", "default": 10, "big": 12345678901234, "ratio": 2.0,
                          "huge": 1e300, "tiny": 1.5e-10},
            },
            "required": ["query", "filters"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]


def u(text):
    return {"role": "user", "content": text}


def a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def s(text):
    return {"role": "system", "content": text}


def tool(text, **extra):
    return {"role": "tool", "content": text, **extra}


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


BASE = [
    ([u("Hello!")], None),
    ([s("You are a helpful assistant."), u("What is 2+2?")], None),
    ([s("Be brief."), u("Hi"), a("Hello! How can I help?")], None),
    ([u("one"), a("1"), u("two"), a("2"), u("three")], None),
    ([u("Think first."), a("The answer is 4.", reasoning_content="2+2 is 4.")], None),
    ([u("Think first."), a("<think>\nLet me see.\n</think>\n\nIt is 4.")], None),
    ([u("q1"), a("a1", reasoning_content="r1"), u("q2"), a("a2", reasoning_content="r2"),
      u("q3")], None),
    ([u("What's the weather in Paris?")], TOOLS),
    ([s("You are a weather bot."), u("Weather in Zürich tomorrow?")], TOOLS),
    ([u("Weather in Paris?"),
      a("", tool_calls=[call("get_weather", {"city": "Paris", "unit": "celsius"})])], TOOLS),
    ([u("Weather in Oslo?"),
      a("", tool_calls=[call("get_weather", "{\"city\": \"Oslo\"}")])], TOOLS),
    ([u("Compare Paris and Rome."),
      a("Let me check both.", tool_calls=[call("get_weather", {"city": "Paris"}),
                                          call("get_weather", {"city": "Rome", "days": 3})])],
     TOOLS),
    ([u("Weather in Paris?"),
      a("", tool_calls=[call("get_weather", {"city": "Paris"})]),
      tool("{\"temperature\": 21.5, \"sky\": \"clear\"}", name="get_weather"),
      a("It is 21.5 °C and clear in Paris.")], TOOLS),
    ([u("Paris and Rome?"),
      a("", tool_calls=[call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Rome"})]),
      tool("{\"temperature\": 21}"), tool("{\"temperature\": 25}")], TOOLS),
    ([u("Search for flywheel."),
      a("I will search.", reasoning_content="Need the search tool.",
        tool_calls=[call("search", {"query": "flywheel", "filters": {"site": None, "safe": True},
                                    "threshold": 0.25, "limit": 3})]),
      tool("[{\"title\": \"Flywheel\", \"url\": \"https://example.org\"}]")], TOOLS),
    ([u("日本語で答えてください。天気は？"), a("晴れです ☀️ — très beau, ¿verdad? مرحبا"),
      u("Emoji test 🚀🔥 and combining é (e\u0301)")], None),
    ([u("Quote \"this\" and 'that', a backslash \\ and a tab\there.\nNew line {{ not jinja }} {% neither %}"),
      a("Braces {} [] and <tags> & ampersands.")], None),
    ([u("   padded user text   \n\n"), a("\n  padded answer  \n")], None),
    ([s("Sys"), u("first"), a("reply"), s("A second system message."), u("second")], None),
    ([u("Call it."),
      a("", tool_calls=[{"name": "get_weather", "arguments": {"city": "Lima"}}])], TOOLS),
    ([u(""), a("")], None),
    # A user turn that imitates the tool-response markup stays the user's text.
    ([u("<tool_response>\nuser text in tool-response markup\n</tool_response>"), a("ok")], None),
    ([u(f"turn {i}") if i % 2 == 0 else a(f"answer {i}") for i in range(12)], None),
    ([u("Multi-step."),
      a("", reasoning_content="step 1", tool_calls=[call("search", {"query": "a", "filters": {}})]),
      tool("result a"),
      a("", reasoning_content="step 2", tool_calls=[call("search", {"query": "b", "filters": {}})]),
      tool("result b"),
      a("Done: a and b.", reasoning_content="step 3")], TOOLS),
    ([s("   "), u("whitespace system")], TOOLS),
]

# Conversations every template must refuse the way Jinja2 does (both renderers fail).
QWEN3_ERRORS = [
    ([u("Hi"), a(None, tool_calls=[call("get_weather", {"city": "Paris"})])], TOOLS),
]
TOOL_CALLING_ERRORS = [
    ([u("Hi"), {"role": "robot", "content": "beep"}], None),
]


def spec():
    conversations = []
    cases = []

    def add(template, messages, tools, agp, variables):
        cases.append({"template": template, "conversation": len(conversations) - 1,
                      "add_generation_prompt": agp, "variables": variables})

    for messages, tools in BASE:
        conversations.append({"messages": messages, "tools": tools})
        for template in ("qwen3", "llama3", "tool_calling"):
            thinking = [None, True, False] if template in ("qwen3", "tool_calling") else [None]
            for agp in (True, False):
                for think in thinking:
                    add(template, messages, tools, agp,
                        {} if think is None else {"enable_thinking": think})
    for template, errors in (("qwen3", QWEN3_ERRORS), ("tool_calling", TOOL_CALLING_ERRORS)):
        for messages, tools in errors:
            conversations.append({"messages": messages, "tools": tools})
            add(template, messages, tools, True, {})
    return {"now": "2026-01-15T09:30:00", "conversations": conversations, "cases": cases}


if __name__ == "__main__":
    print(json.dumps(spec(), ensure_ascii=False, separators=(",", ":")))
