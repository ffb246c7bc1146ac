#!/usr/bin/env python3
"""Renders every chat template of tests/data/chat_templates (and configs/chat_templates/zaya1.jinja) over many
conversations exactly as Hugging Face transformers' apply_chat_template does, and writes the inputs and the
expected outputs (or the expectation of an error) to tests/data/chat_templates/cases.json for
tests/jinja_test.cpp, which renders the same cases with zaya.cpp's interpreter and compares byte for byte.

The jinja2 environment is transformers' (utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker-like
{% generation %}, loopcontrols]), its json.dumps `tojson` filter, raise_exception and strftime_now globals;
render(messages=..., tools=..., documents=..., add_generation_prompt=..., **special_tokens, **kwargs) with
tools=None and documents=None when not given. strftime_now reads a fixed UTC time (NOW below) so the cases are
reproducible; the C++ test renders with TZ=UTC and the same time.

Needs only python3-jinja2 (apt-get install python3-jinja2); run from the repository root:
  python3 tools/reference/render_chat_templates.py
"""
import copy
import json
import os
import sys
from datetime import datetime, timezone

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
NOW = 1741945613  # 2025-03-14 09:46:53 UTC


class GenerationTracker(Extension):
    """transformers' AssistantTracker when not tracking: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(NOW, timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# Special tokens as each model's tokenizer_config.json passes them (bos_token / eos_token kwargs).
TOKENS = {
    "Qwen-Qwen3-0.6B.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "Qwen-QwQ-32B.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "meta-llama-Llama-3.3-70B-Instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.2-3B-Instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "google-gemma-2-2b-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "google-gemma-3-12b-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "microsoft-Phi-3.5-mini-instruct.jinja": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": {"bos_token": "<s>", "eos_token": "</s>"},
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": {"bos_token": "<｜begin▁of▁sentence｜>",
                                                       "eos_token": "<｜end▁of▁sentence｜>"},
    "deepseek-ai-DeepSeek-V3.1.jinja": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": {"bos_token": "<|begin_of_text|>",
                                                          "eos_token": "<|im_end|>"},
    "zaya1.jinja": {"bos_token": "<bos>", "eos_token": "<|im_end|>"},
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location.  ",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["location"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_files",
        "description": "Search files — ünïcödé “quotes” and a <tag> & ampersand",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "max_results": {"type": "number", "description": "Limit, e.g. 1.5e-07 or 1e16"},
                "paths": {"type": "array", "items": {"type": "string"}, "description": "Where"},
                "options": {"type": "object", "additionalProperties": {"type": "boolean"},
                            "description": "Flags"},
                "mode": {"type": ["string", "null"], "description": "Either"},
            },
            "required": ["query", "paths"],
        },
        "return": {"type": "array", "description": "Matching paths"},
    },
}
BARE = {"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object", "properties": {}}}}

CALL_ID = "call12345"  # Mistral requires 9 alphanumeric characters


def tool_call(name, args, as_string=False, call_id=CALL_ID):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}


def conversations():
    """(name, messages, tools, extra kwargs) tuples."""
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    c = []
    c.append(("user_only", [{"role": "user", "content": "Hello!"}], None))
    c.append(("system_user", [sys_msg, {"role": "user", "content": "What is 2+2?"}], None))
    c.append(("multi_turn", [sys_msg, {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello! How can I help?"},
                             {"role": "user", "content": "Tell me a joke."}], None))
    c.append(("multi_turn_no_system", [{"role": "user", "content": "One"}, {"role": "assistant", "content": "Two"},
                                       {"role": "user", "content": "Three"},
                                       {"role": "assistant", "content": "Four"}], None))
    c.append(("whitespace_unicode", [
        {"role": "system", "content": "  Système: réponds en français.\n\n"},
        {"role": "user", "content": "  Ünïcödé “quotes” 'single' \"double\" \\ backslash\ttab\n  \n"},
        {"role": "assistant", "content": "\n  日本語 and emoji 🙂 \n"},
        {"role": "user", "content": "{{ not a template }} {% neither %}"}], None))
    c.append(("tools_user", [sys_msg, {"role": "user", "content": "What's the weather in Paris?"}],
              [WEATHER, SEARCH]))
    c.append(("tools_no_system", [{"role": "user", "content": "List the files."}], [BARE]))
    c.append(("tool_call_round", [
        sys_msg, {"role": "user", "content": "Weather in Paris and in Oslo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("get_current_weather", {"location": "Paris, France", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": CALL_ID, "name": "get_current_weather",
         "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and sunny in Paris."},
        {"role": "user", "content": "Thanks!"}], [WEATHER]))
    c.append(("tool_call_string_args", [
        {"role": "user", "content": "Search for TODO."},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("search_files", {"query": "TODO", "paths": ["src", "docs"]}, as_string=True)]},
        {"role": "tool", "tool_call_id": CALL_ID, "content": "[\"src/a.cpp\", \"docs/b.md\"]"}], [SEARCH]))
    c.append(("parallel_tool_calls", [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "Let me check both.",
         "tool_calls": [tool_call("get_current_weather", {"location": "Paris", "days": 3}),
                        tool_call("get_current_weather", {"location": "Oslo", "unit": "fahrenheit"},
                                  call_id="call67890")]},
        {"role": "tool", "tool_call_id": CALL_ID, "content": "sunny"},
        {"role": "tool", "tool_call_id": "call67890", "content": "snow"}], [WEATHER]))
    c.append(("json_numbers", [
        {"role": "user", "content": "Numbers"},
        {"role": "assistant", "content": "",
         "tool_calls": [tool_call("search_files", {"query": "x", "max_results": 1.5, "tiny": 1.5e-07, "big": 1e16,
                                                   "round": 100.0, "neg": -0.0, "int": 12345678901234,
                                                   "flag": True, "none": None, "nested": {"a": [1, 2.25, "ü"]},
                                                   "paths": []})]},
        {"role": "tool", "tool_call_id": CALL_ID, "content": "ok"}], [SEARCH]))
    c.append(("thinking_history", [
        {"role": "user", "content": "Solve 3*7."},
        {"role": "assistant", "content": "<think>\nI multiply 3 by 7.\n</think>\n\n21"},
        {"role": "user", "content": "And 4*5?"}], None))
    c.append(("reasoning_content", [
        {"role": "user", "content": "Solve 3*7."},
        {"role": "assistant", "content": "21", "reasoning_content": "3*7 is 21."}], None))
    c.append(("content_parts", [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": " this."}]}],
        None))
    c.append(("roles_not_alternating", [{"role": "user", "content": "A"}, {"role": "user", "content": "B"}], None))
    c.append(("empty_messages", [], None))
    c.append(("system_only", [sys_msg], None))
    c.append(("assistant_prefill", [{"role": "user", "content": "Write a haiku."},
                                    {"role": "assistant", "content": "Autumn"}], None))
    return c


def main():
    env = make_env()
    names = sorted(f for f in os.listdir(DATA) if f.endswith(".jinja"))
    sources = {n: os.path.join(DATA, n) for n in names}
    sources["zaya1.jinja"] = os.path.join(ROOT, "configs", "chat_templates", "zaya1.jinja")
    cases = []
    for name, path in sources.items():
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
        template = env.from_string(text)
        thinking_kw = "enable_thinking" in text or "thinking" in text
        for conv_name, messages, tools in conversations():
            for agp in (True, False):
                for think in ((None, True, False) if thinking_kw else (None,)):
                    kwargs = {"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools), "documents": None,
                              "add_generation_prompt": agp}
                    kwargs.update(TOKENS[name])
                    if think is not None:
                        kwargs["enable_thinking"] = think
                        if "DeepSeek-V3" in name:
                            kwargs["thinking"] = think
                    case = {"template": name, "conversation": conv_name, "context": copy.deepcopy(kwargs)}
                    try:
                        case["expected"] = template.render(**kwargs)
                    except Exception as e:  # jinja2 raised: the C++ renderer must raise too
                        case["error"] = f"{type(e).__name__}: {e}"
                    cases.append(case)
    out = {"generator": "tools/reference/render_chat_templates.py", "jinja2": jinja2.__version__, "now": NOW,
           "cases": cases}
    with open(os.path.join(DATA, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"{len(sources)} templates, {len(cases)} cases ({errors} expect an error)", file=sys.stderr)


if __name__ == "__main__":
    main()
