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


# Language features, each rendered by jinja2 with the same environment: the C++ test compares them byte for byte
# too (the unit tests of tests/jinja_test.cpp cover the rest: errors with line:column, limits, the API).
CTX = {"s": "  Hello, World  ", "n": 7, "f": 2.5, "neg": -3, "t": True, "no": None, "empty": "", "l": [3, 1, 2],
       "words": ["b", "A", "c", "a"], "d": {"b": 2, "a": 1, "c": {"x": [1, "y"]}},
       "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "x": 1},
                {"role": "user", "content": "bye"}],
       "u": "Ünïcödé 🙂 text", "nested": [[1, 2], [3, 4]], "big": 12345678901234, "tiny": 1.5e-07, "huge": 1e16}
FEATURES = [
    # output and Python str()
    "{{ n }}|{{ f }}|{{ t }}|{{ no }}|{{ l }}|{{ d }}|{{ missing }}|{{ tiny }}|{{ huge }}|{{ 1.0 }}|{{ 1e3 }}",
    "{{ msgs[1] }}|{{ (1, 'a') }}|{{ (1,) }}|{{ \"it's\" }}|{{ ['a\\nb'] }}|{{ 0.1 + 0.2 }}|{{ 10 / 4 }}",
    # whitespace control, trim_blocks, lstrip_blocks
    "a\n  {% if t %}\n    b\n  {% endif %}\nc\n",
    "a  {%- if t -%}  b  {%- endif -%}  c",
    "a\n  {%+ if t %}b{% endif +%}\nc",
    "x {{- ' y ' -}} z\n{# comment #}\n  {#- c2 -#}  w",
    "  {% for i in l %}\n  {{ i }}\n  {% endfor %}\n",
    "{% raw %}{{ not rendered }}{% endraw %}|{{ '{{' }}",
    "line1\r\nline2\rline3\n\n",
    # expressions
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7.5 // 2 }} {{ 'ab' * 3 }} {{ [1] * 2 }}",
    "{{ 'a' ~ 1 ~ none ~ missing ~ [1] }} {{ 'x' + 'y' }} {{ l + [4] }} {{ -n }} {{ +f }} {{ not t }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ t == 1 }} {{ 'a' != 'b' }} {{ [1,2] == [1,2] }} {{ 'ab' < 'b' }}",
    "{{ 'ell' in s }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 5 not in l }} {{ 'x' in missing }}",
    "{{ t and 'yes' }} {{ no or 'fallback' }} {{ empty or no }} {{ 0 and 1 }} {{ 'a' if t else 'b' }} {{ 'a' if no }}.",
    "{{ s[2:7] }}|{{ s[::-1] }}|{{ l[1:] }}|{{ l[-1] }}|{{ u[0] }}|{{ u[-6:] }}|{{ u[::2] }}|{{ l[::-2] }}|{{ l[5:] }}",
    "{{ d.a }} {{ d['b'] }} {{ d.c.x[1] }} {{ d.zz is defined }} {{ msgs[0].role }} {{ l.0 }} {{ nested[1][0] }}",
    "{{ {'k': 1, 'j': [2]} }} {{ [1, 'a', none, true] }} {{ ('a', 'b')[1] }} {{ {'a': 1}.a }}",
    "{{ 'abc' 'def' }} {{ \"q'\" }} {{ 'tab\\tnew\\nline' }} {{ '\\u00e9\\x41' }}",
    # statements
    "{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}:{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}",
    "{% for a, b in nested %}{{ a + b }} {% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in l %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for row in nested %}{% for x in row %}{{ loop.index }}{{ x }}{% endfor %}|{% endfor %}",
    "{% if n > 10 %}big{% elif n > 5 %}mid{% else %}small{% endif %}",
    "{% set x = 1 %}{% set y, z = 2, 3 %}{{ x + y + z }}{% set w %}block {{ x }}{% endset %}[{{ w }}]",
    "{% set x = 'outer' %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}|{% if t %}{% set x = 'if' %}{% endif %}{{ x }}",
    "{% set ns = namespace(count=0, found=false) %}{% for i in l %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }} {{ ns.found }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
    "{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inside{% endcall %}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "{% filter upper %}shout {{ n }}{% endfilter %}|{% set q | trim %}  spaced  {% endset %}[{{ q }}]",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}",
    "{% generation %}assistant text{% endgeneration %}",
    # tests
    "{{ n is defined }} {{ missing is undefined }} {{ no is none }} {{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is sequence }} {{ n is number }} {{ t is boolean }} {{ n is integer }} {{ f is float }}",
    "{{ t is true }} {{ t is false }} {{ 0 is false }} {{ n is divisibleby 7 }} {{ n is divisibleby(2) }} {{ n is odd }} {{ n is even }} {{ 'x' is equalto 'x' }} {{ 1 is eq 1 }} {{ n is gt 3 }} {{ n is not lt 3 }}",
    "{{ missing is iterable }} {{ missing is sequence }} {{ d is iterable }} {{ 1 is iterable }} {{ none is mapping }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is in l }} {{ range is callable }} {{ no is sameas none }}",
    # filters
    "{{ s | trim }}|{{ 'xxhixx' | trim('x') }}|{{ s | length }}|{{ u | length }}|{{ l | count }}|{{ d | length }}|{{ missing | length }}",
    "{{ d | items | list }}|{{ s | upper }}|{{ s | lower }}|{{ 'hELLO world' | capitalize }}|{{ 'hello big-world (x)' | title }}",
    "{{ l | join(', ') }}|{{ msgs | map(attribute='role') | join }}|{{ l | first }}|{{ l | last }}|{{ [] | first }}|{{ 'abc' | last }}",
    "{{ missing | default('dflt') }}|{{ empty | default('dflt') }}|{{ empty | default('dflt', true) }}|{{ no | d('x') }}",
    "{{ 'a-b-a' | replace('a', 'x') }}|{{ 'a-b-a' | replace('a', 'x', 1) }}|{{ '42' | int + 1 }}|{{ '3.9' | int }}|{{ 'x' | int(7) }}|{{ '2.5' | float }}|{{ 3 | float }}",
    "{{ neg | abs }}|{{ -2.5 | abs }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 2.1 | round(0, 'ceil') }}|{{ 7 | round }}",
    "{{ words | sort }}|{{ words | sort(reverse=true) }}|{{ words | sort(case_sensitive=true) }}|{{ msgs | sort(attribute='content') | map(attribute='content') | list }}",
    "{{ words | unique | list }}|{{ [1, 2, 1, 3] | unique | list }}|{{ d | dictsort }}|{{ {'b': 1, 'A': 2} | dictsort }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}|{{ msgs | rejectattr('x') | map(attribute='role') | join(',') }}|{{ l | select('odd') | list }}|{{ l | reject('odd') | list }}|{{ msgs | selectattr('x', 'defined') | list }}",
    "{{ l | map('string') | join('+') }}|{{ ['a', 'b'] | map('upper') | list }}|{{ msgs | map(attribute='missing', default='?') | list }}",
    "[{{ 'a\\nb\\n\\nc' | indent }}]|[{{ 'a\\nb' | indent(2, true) }}]|[{{ 'a\\n\\nb' | indent('>', blank=true) }}]",
    "{{ '<b>&\"\\'' | e }}|{{ '<b>' | escape }}|{{ '<b>' | safe }}|{{ 'one two  three' | wordcount }}|{{ [1,2,3,4,5] | batch(2) | list }}|{{ [1,2,3] | batch(2, 0) | list }}",
    "{{ l | sum }}|{{ l | min }}|{{ l | max }}|{{ words | max }}|{{ l | reverse | list }}|{{ 'abc' | reverse }}|{{ l | list }}|{{ 'ab' | list }}|{{ n | string }}|{{ t | string }}",
    "{{ d | tojson }}|{{ msgs[1] | tojson }}|{{ u | tojson }}|{{ [1.0, 1.5e-07, 1e16, -0.0, true, none] | tojson }}",
    "{{ d | tojson(indent=2) }}|{{ {} | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ u | tojson(ensure_ascii=true) }}",
    "{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ 'tab\\t\\\\ \\u0001 \"q\"' | tojson }}",
    "{{ 'abc' | center(9) }}|{{ d | attr('a') }}|{{ msgs | map(attribute='content') | map('length') | list }}",
    # methods
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ u.strip('Üt') }}",
    "{{ 'a,b,,c'.split(',') }}|{{ '  a  b c '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'x</think>y'.split('</think>')[-1] }}",
    "{{ s.startswith('  He') }}|{{ s.endswith('  ') }}|{{ 'abc'.startswith(('x', 'a')) }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello world_x'.title() }}|{{ 'hELLO'.capitalize() }}",
    "{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.find('c') }}|{{ 'abc'.find('z') }}|{{ 'a-b-c'.count('-') }}|{{ '-'.join(['x', 'y']) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}",
    "{{ '{} and {}'.format('x', 1) }}|{{ '{0}{name}'.format('a', name='b') }}|{{ '12'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ ' '.isspace() }}|{{ '7'.zfill(3) }}",
    "{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d.keys() | list }}|{{ d.values() | list | length }}|{{ d.items() | list | first }}|{{ l.index(2) }}|{{ l.count(3) }}",
    # globals
    "{{ range(3) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0, -2) | list }}|{% for i in range(2) %}{{ i }}{% endfor %}",
    "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%dT%H:%M') }}|{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}",
    "{% set j = joiner('; ') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}",
    # undefined semantics
    "[{{ missing }}][{{ missing | string }}][{{ missing ~ 'x' }}][{{ missing | trim }}][{% for x in missing %}x{% endfor %}][{{ d.zz }}][{{ no.attr }}]",
    "{% if missing %}y{% else %}n{% endif %}{% if missing == missing %}eq{% endif %}{% if not missing %}!{% endif %}{{ missing is none }}",
    # errors jinja2 raises
    "{{ missing.attr }}",
    "{{ missing + 1 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}",
    "{{ raise_exception('custom failure') }}",
    "{{ l.append(4) }}",
    "{{ range(200000) | length }}",
    "{{ n | items | list }}",
    "{{ 'a' < 1 }}",
    "{% for x in 5 %}{% endfor %}",
    "{% set a, b = [1, 2, 3] %}",
    "{% set x.y = 1 %}",
    "{{ 1 in 2 }}",
    "{{ missing() }}",
    "{{ n(1) }}",
]


def render_features(env):
    out = []
    for text in FEATURES:
        case = {"template": text, "context": CTX}
        try:
            case["expected"] = env.from_string(text).render(**CTX)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return out


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
    features = render_features(env)
    out = {"generator": "tools/reference/render_chat_templates.py", "jinja2": jinja2.__version__, "now": NOW,
           "cases": cases, "features": features}
    with open(os.path.join(DATA, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"{len(sources)} templates, {len(cases)} cases ({errors} expect an error); {len(features)} feature cases "
          f"({sum('error' in c for c in features)} expect an error)", file=sys.stderr)


if __name__ == "__main__":
    main()
