#!/usr/bin/env python3
"""Golden outputs for the C++ chat-template interpreter (tests/cpp/test_chat_template.cpp).

Renders every case below with Jinja2 in the environment transformers uses for chat
templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now) and writes
one JSON object per line to chat_template_golden.jsonl:

    {"name", "template" | "template_ref", "context", "output"}    rendered text
    {"name", "template" | "template_ref", "context", "error"}     Jinja2 raised (C++ must throw)

template_ref names a template the C++ test loads itself: "qwen3" / "qwen2.5" (the
tokenizer_config.json chat_template in tests/data/tokenizers/qwen/).

Run from anywhere:  python3 tests/data/gen_chat_golden.py   (needs Jinja2 3.1.x)
Contexts are dumped in insertion order; the C++ test reads them as ordered_json.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = HERE  # tests/data: the plain files read here are not among the compressed ones


def make_env():
    # transformers.utils.chat_template_utils._compile_jinja_template, minus the
    # AssistantTracker extension ({% generation %} only records offsets).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# A Llama-3.1-style template written for these tests (same constructs as Meta's:
# bos_token, header ids, a date defaulting through strftime_now, tools as JSON with
# indent=4 in the system or first user message, builtin-tool calls, ipython role).
LLAMA31_STYLE = """{{- bos_token }}
{%- set tools = custom_tools if custom_tools is defined else tools %}
{%- if tools_in_user_message is not defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if date_string is not defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if tools is not defined %}
    {%- set tools = none %}
{%- endif %}
{%- macro header(role) -%}
<|start_header_id|>{{ role }}<|end_header_id|>{{ "\\n\\n" }}
{%- endmacro %}
{%- macro tool_list(tools) %}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endmacro %}

{#- Pull the system message out of the conversation. #}
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- header('system') }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " ~ date_string ~ "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "Answer with a JSON function call when a function helps.\\n" }}
    {{- 'Format: {"name": function name, "parameters": {argument name: value}}.\\n\\n' }}
    {{- tool_list(tools) }}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and tools is not none %}
    {%- if messages | length == 0 %}
        {{- raise_exception("tools_in_user_message needs a first user message") }}
    {%- endif %}
    {%- set first_user_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
    {{- header('user') -}}
    {{- "These functions are available; answer with a JSON function call where one helps.\\n\\n" }}
    {{- 'Format: {"name": function name, "parameters": {argument name: value}}.\\n\\n' }}
    {{- tool_list(tools) }}
    {{- first_user_message ~ "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role in ['ipython', 'tool'] or 'tool_calls' in message) %}
        {{- header(message['role']) + message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if message.tool_calls | length != 1 %}
            {{- raise_exception("only one tool call per message is supported") }}
        {%- endif %}
        {%- set call = message.tool_calls[0].function %}
        {{- header('assistant') -}}
        {%- if builtin_tools is defined and call.name in builtin_tools %}
            {{- "<|python_tag|>" + call.name + ".call(" }}
            {%- for arg_name, arg_val in call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}{{ ", " }}{% endif %}
            {%- endfor %}
            {{- ")" }}
        {%- else %}
            {{- '{"name": "' + call.name + '", "parameters": ' }}
            {{- call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {{- "<|eom_id|>" if builtin_tools is defined else "<|eot_id|>" }}
    {%- else %}
        {{- header('ipython') }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- header('assistant') }}
{%- endif %}
"""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city — in °C",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
                "units": {"type": "string", "enum": ["c", "f"], "default": None},
                "detailed": {"type": "boolean", "default": False},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {"type": "function", "function": {"name": "search", "description": "Search the web",
                                                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}

MSGS_BASIC = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Weather?"}]
MSGS_TOOLS = [
    {"role": "user", "content": "Weather in Zürich for 2 days?"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
    {"role": "tool", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
    {"role": "tool", "content": "second response"},
    {"role": "assistant", "content": "It is 21.5 °C and clear."},
]
MSGS_TOOLS_STRING_ARGS = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Find rlhost"},
    {"role": "assistant", "content": "Let me search.",
     "tool_calls": [{"function": {"name": "search", "arguments": "{\"q\": \"rlhost\"}"}},
                    {"name": "search", "arguments": {"q": "rl host", "page": 2}}]},
    {"role": "tool", "content": "<results/>"},
    {"role": "user", "content": "<tool_response>\nmanual\n</tool_response>"},
    {"role": "assistant", "content": "<think>\nThe user pasted a response.\n</think>\n\nDone."},
]
MSGS_REASONING = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Add two and two."},
    {"role": "user", "content": "3+3?"},
    {"role": "assistant", "content": "<think>\n\nsix\n\n</think>\n\n\n6"},
]


def template_cases():
    """(name, template, context) for targeted constructs."""
    d = {"b": 1, "a": [1, 2, {"z": None, "y": True}], "items": "key named items", "é": "ü"}
    people = [{"name": "Ann", "age": 31, "role": "admin"}, {"name": "bob", "age": 25},
              {"name": "Cid", "age": 40, "role": "user"}]
    c = []

    def add(name, template, **ctx):
        c.append((name, template, ctx))

    # ---- whitespace control, trim_blocks, lstrip_blocks, comments, raw -----------------
    add("ws/plain", "Hello\nworld")
    add("ws/trailing_newline_dropped", "a\n")
    add("ws/two_trailing_newlines", "a\n\n")
    add("ws/crlf_normalised", "a\r\nb {{ 'x' }}\r\nc\rd\r\n")
    add("ws/trim_blocks", "{% if true %}\nX\n{% endif %}\nY")
    add("ws/lstrip_blocks", "  {% if true %}\n  X\n  {% endif %}\nY")
    add("ws/lstrip_only_at_line_start", "a  {% if true %}b{% endif %}  c")
    add("ws/variable_not_lstripped", "  {{ 'x' }}\n  {% if true %}y{% endif %}")
    add("ws/minus_both_sides", "a  \n {{- 1 -}} \n  b")
    add("ws/minus_block", "a \n {%- if true -%} \n b \n {%- endif %} \n c")
    add("ws/plus_disables", "  {%+ if true %}x{% endif +%}\nY")
    add("ws/plus_variable", "a  {{+ 'x' }}")
    add("ws/comment", "a {# note #} b\n  {# full line #}\nc {#- tight -#} d")
    add("ws/comment_plus", "  {#+ keep #}\nx")
    add("ws/tabs_and_unicode_space", "\t {% if true %}x{% endif %}\n\u3000{% if true %}y{% endif %}\n\u00a0 {%- if true %}z{% endif %}")
    add("ws/raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!")
    add("ws/raw_trim", "  {%- raw -%}  \n{{ x }}\n  {%- endraw %}\nafter")
    add("ws/nested_line_starting", "{% if true %}\n  {% if true %}x{% endif %}\n{% endif %}\nend")
    add("ws/block_end_newline_only_once", "{% if true %}\n\nX{% endif %}")
    add("ws/minus_eats_unicode_space", "a\u2003\u00a0\n{{- 'b' -}}\u3000\n c")
    add("ws/set_lines", "{% set x = 1 %}\n{% set y = 2 %}\n{{ x + y }}\n")
    add("ws/for_lines", "{% for i in range(3) %}\n  - {{ i }}\n{% endfor %}\ndone")
    add("ws/qwen_style_indent", "{%- for m in messages %}\n    {{- '<' + m.role + '>' }}\n    {%- if not loop.last %}\n        {{- '|' }}\n    {%- endif %}\n{%- endfor %}\n", messages=MSGS_BASIC)
    # ---- literals and printing ---------------------------------------------------------
    add("lit/strings", r"""{{ 'a\nb' }}|{{ "t\tq" }}|{{ '\x41\101\u00e9\U0001F600' }}|{{ 'it\'s' }}|{{ "say \"hi\"" }}|{{ '\\' }}|{{ 'adj' "acent" }}|{{ '\q' }}""")
    add("lit/numbers", "{{ 1 }} {{ -1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1/3 }} {{ 2/3*3 }} {{ 123456789.123456789 }}")
    add("lit/constants", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ [] }} {{ {} }} {{ () }}")
    add("lit/repr_list", "{{ [1, 'a', none, true, 1.5, -0.0, {'k': 'v', 'n': [2]}] }}")
    add("lit/repr_tuple", "{{ (1,) }} {{ (1, 'b') }} {{ 1, 2 }}")
    add("lit/repr_quotes", """{{ ["it's", 'say "hi"', 'both \\'"', 'back\\\\slash', 'nl\\n', 'é', '\\x01', '\\u00a0', '\\u200b', '中文'] }}""")
    add("lit/repr_context", "{{ messages[0] }} {{ d }}", messages=MSGS_BASIC, d=d)
    add("lit/print_floats_from_context", "{{ xs }} {% for x in xs %}{{ x }};{% endfor %}", xs=[1.0, 0.5, 1e-7, 1e22, 123.456, -2.5e-5, 3])
    # ---- operators ----------------------------------------------------------------------
    add("op/arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 % 2 }} {{ -7.5 // 2 }} {{ 10 / 4 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ 3 * 1.5 }} {{ true + 1 }} {{ -(3) }} {{ +2 }} {{ 1 + 2 * 3 - 4 }}")
    add("op/concat", "{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ u }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [0] * 2 }}")
    add("op/compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] == [1, 2] }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }} {{ 'a' != 'a' }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ 2 >= 2.0 }} {{ 'é' > 'z' }}")
    add("op/in", "{{ 'a' in 'abc' }} {{ 'd' not in 'abc' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in [] }} {{ 'x' in u }} {{ 2 in (1, 2) }} {{ '' in 'abc' }}")
    add("op/and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }} {{ '' and 1 }} {{ u or 'dflt' }} {{ not 1 == 2 }} {{ not none }} {{ 1 and 2 or 3 }}")
    add("op/ternary", "[{{ 'y' if true else 'n' }}][{{ 'y' if false }}][{{ 'a' if 0 else 'b' if 1 else 'c' }}][{{ ('p' if true else 'q') ~ '!' }}]")
    add("op/unary_filter_precedence", "{{ -3|abs }} {{ - 3 | string }} {{ not true | string }}")
    add("op/filter_binds_tighter", "{{ 'ab' + 'cd' | upper }} {{ 1 + [1, 2] | length }}")
    # ---- names, attributes, subscripts ----------------------------------------------------
    add("sub/index_and_attr", "{{ messages[0].role }} {{ messages[-1]['content'] }} {{ messages.1.content }} {{ messages|length }}", messages=MSGS_BASIC)
    add("sub/slices", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ xs[-2:] }} {{ xs[1:3] }} {{ xs[3:1:-1] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} {{ 'abc'[-1] }} {{ 'abc'[10] is defined }}", xs=[0, 1, 2, 3, 4])
    add("sub/reverse_messages", "{% for m in messages[::-1] %}{{ loop.index0 }}:{{ m.role }} {% endfor %}", messages=MSGS_BASIC)
    add("sub/missing", "[{{ d.nope }}][{{ d['nope'] }}][{{ xs[9] }}][{{ d.nope is defined }}][{{ xs[9] is undefined }}][{{ u is defined }}]", d=d, xs=[1])
    add("sub/dict_methods", "{{ d.get('b') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.keys() | list }} {{ d.values() | list | length }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", d=d)
    add("sub/attr_prefers_method", "{{ d['items'] }} {{ d.items is defined }} {{ d.b }} {{ d['é'] }}", d=d)
    add("sub/nested", "{{ d.a[2].y }} {{ d['a'][-1]['z'] }} {{ d.a.2.z is none }}", d=d)
    # ---- statements -----------------------------------------------------------------------
    add("for/loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}")
    add("for/prev_next_cycle", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {{ loop.cycle('odd', 'even') }};{% endfor %}")
    add("for/else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}no{% endfor %}")
    add("for/filter", "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }} {% endfor %}", messages=MSGS_BASIC)
    add("for/break_continue", "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}")
    add("for/nested_outer_loop", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}")
    add("for/dict_and_unpack", "{% for k in d %}{{ k }},{% endfor %} {% for a, b in [[1, 2], (3, 4)] %}{{ a + b }};{% endfor %} {% for k, v in d | dictsort %}{{ k }};{% endfor %}", d={"b": 1, "a": 2, "c": 3})
    add("for/scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}")
    add("for/set_in_if_leaks_not_across_iterations", "{% for i in [1, 2] %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}")
    add("for/else_sets_outer", "{% for i in [] %}{% else %}{% set z = 'else' %}{% endfor %}{{ z }}")
    add("for/loop_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}")
    add("if/elif_else", "{% for n in [0, 1, 2, 3] %}{% if n == 0 %}zero{% elif n == 1 %}one{% elif n is even %}even{% else %}other{% endif %} {% endfor %}")
    add("set/namespace", "{% set ns = namespace(count=0, found=false) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.count = ns.count + 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns.missing is defined }}", messages=MSGS_BASIC)
    add("set/namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}")
    add("set/tuple_and_block", "{% set a, b = 1, 'two' %}{{ a }}{{ b }} {% set blk %}x={{ a }}\n{% endset %}[{{ blk }}] {% set up | upper | trim %}  shout {% endset %}[{{ up }}]")
    add("set/with", "{% set x = 'outer' %}{% with x = 'inner', y = x %}{{ x }}/{{ y }}{% endwith %}/{{ x }}")
    add("macro/basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(punct='.', name='Cy') }} [{{ greet() }}]")
    add("macro/recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(10) }}")
    add("macro/varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}")
    add("macro/sees_later_globals", "{% set x = 3 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 4 %}{{ m() }}")
    add("macro/render_schema", "{% macro render(v, depth) %}{% if v is mapping %}{% for k, x in v.items() %}\n{{ '  ' * depth }}{{ k }}:{{ render(x, depth + 1) }}{% endfor %}{% elif v is string %} {{ v }}{% else %} {{ v | tojson }}{% endif %}{% endmacro %}{{ render(tool, 0) }}", tool=WEATHER_TOOL)
    add("stmt/filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}")
    add("stmt/print", "{% print 'p' ~ 1 %}")
    # ---- filters ----------------------------------------------------------------------------
    add("filter/tojson_default", "{{ tools | tojson }}", tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("filter/tojson_indent", "{{ tool | tojson(indent=4) }}\n{{ [[], {}, [1, [2]]] | tojson(indent=2) }}", tool=WEATHER_TOOL)
    add("filter/tojson_options", "{{ d | tojson(separators=(',', ':')) }} {{ d | tojson(sort_keys=true) }} {{ 'é\u2028ü😀' | tojson(ensure_ascii=true) }} {{ 'é😀' | tojson }}", d={"b": [1.0, 2.5e-8, 1e20], "a": None, "c": True})
    add("filter/tojson_escapes", "{{ s | tojson }}", s="quote\" back\\ nl\n cr\r tab\t bs\b ff\f nul\x00 esc\x1b del\x7f")
    add("filter/tojson_values", "{{ 1 | tojson }} {{ 1.0 | tojson }} {{ none | tojson }} {{ true | tojson }} {{ 'x' | tojson }} {{ (1, 'a') | tojson }} {{ -0.0 | tojson }}")
    add("filter/length_count", "{{ 'héllo' | length }} {{ [1, 2] | count }} {{ d | length }} {{ u | length }}", d=d)
    add("filter/trim", "[{{ '  a b \n' | trim }}][{{ 'xxaxx' | trim('x') }}][{{ none | trim }}][{{ u | trim }}][{{ '\u3000 a\u00a0' | trim }}]")
    add("filter/string_int_float", "{{ 3 | string }}{{ none | string }} {{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ ' 0x1A' | int(base=16) }} {{ '1_000' | int }} {{ 3.99 | int }} {{ true | int }} {{ none | int }} {{ '2.5' | float }} {{ 'x' | float }} {{ 3 | float }} {{ '-17' | int }}")
    add("filter/first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | last }} {{ d | first }} [{{ [] | first }}]", d={"k": 1, "j": 2})
    add("filter/join", "{{ [1, 'a', none] | join }} {{ ['a', 'b'] | join(', ') }} {{ people | join('/', attribute='name') }} {{ 'abc' | join('-') }}", people=people)
    add("filter/default", "[{{ u | default('dflt') }}][{{ u | d('d') }}][{{ '' | default('empty', true) }}][{{ '' | default('empty') }}][{{ none | default('n') }}][{{ u | default }}][{{ 0 | d(5, boolean=true) }}]")
    add("filter/case", "{{ 'hello World' | upper }} {{ 'HeLLo' | lower }} {{ 'hELLO wORLD' | capitalize }} {{ \"they're bill's (friends)-from [the] {uk}\" | title }} {{ 'Straße ÉCOLE' | lower }} {{ 'école' | upper }}")
    add("filter/replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }} {{ 123 | replace(2, 9) }}")
    add("filter/list_reverse", "{{ 'abc' | list }} {{ d | list }} {{ 'héllo' | reverse }} {{ [1, 2, 3] | reverse | list }} {% for x in [1, 2] | reverse %}{{ x }}{% endfor %} {{ (1, 2) | list }}", d={"x": 1, "y": 2})
    add("filter/select_reject", "{{ people | selectattr('role') | map(attribute='name') | list }} {{ people | rejectattr('role', 'defined') | map(attribute='name') | join }} {{ people | selectattr('role', 'equalto', 'admin') | list | length }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('divisibleby', 2) | list }} {{ [0, 1, '', 'a'] | select | list }}", people=people)
    add("filter/map", "{{ people | map(attribute='age') | sum }} {{ ['a', 'b'] | map('upper') | join }} {{ people | map(attribute='role', default='none') | list }} {{ [[1, 2], [3]] | map('length') | list }} {{ [' a ', 'b '] | map('trim') | list }}", people=people)
    add("filter/items_dictsort", "{% for k, v in d | items %}{{ k }}={{ v }} {% endfor %}{{ d | dictsort }} {{ d | dictsort(by='value', reverse=true) }} {{ {'b': 1, 'A': 2, 'a': 3} | dictsort }} {{ {'b': 1, 'A': 2} | dictsort(true) }}", d={"z": 2, "y": 1, "x": 3})
    add("filter/sort_unique_minmax", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'a', 'C'] | sort }} {{ ['b', 'A', 'a'] | sort(case_sensitive=true) }} {{ people | sort(attribute='age', reverse=true) | map(attribute='name') | join }} {{ ['b', 'A', 'a', 'b'] | unique | list }} {{ [3, 1, 2] | min }} {{ ['b', 'A', 'c'] | max }} {{ people | max(attribute='age') }}", people=people)
    add("filter/numbers", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(method='ceil') }} {{ 2.9 | round(0, 'floor') }} {{ 3 | round }} {{ [1, 2.5] | sum }} {{ [1, 2] | sum(start=10) }}")
    add("filter/center_indent", "[{{ 'ab' | center(7) }}][{{ 'abc' | center(6) }}][{{ 'x' | center(1) }}]\n{{ 'a\nb\n\nc' | indent }}\n{{ 'a\nb\n\nc' | indent(2, first=true, blank=true) }}\n{{ 'a\nb' | indent('> ') }}")
    add("filter/escape_safe_format", "{{ '<a href=\"x\">&\\'</a>' | e }} {{ '<b>' | safe }} {{ '%s-%d' | format('a', 3) }} {{ '%s' | format([1]) }}")
    add("filter/attr", "{{ d | attr('b') }} [{{ d | attr('zz') }}]", d=d)
    # ---- tests ------------------------------------------------------------------------------
    add("test/types", "{% for v in [1, 1.5, true, none, 'a', [1], {'a': 1}, (1,)] %}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is none }}{{ v is string }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is defined }}|{% endfor %}{{ u is iterable }}{{ u is sequence }}{{ u is undefined }}")
    add("test/values", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'abc' is lower }}{{ 'aBc' is lower }}{{ 'ABC' is upper }}{{ 2 is in [1, 2] }}{{ 'a' is eq 'a' }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is ge 3 }}{{ none is sameas none }}{{ range is callable }}{{ 'x' is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}")
    add("test/negated", "{{ u is not defined }} {{ 1 is not none }} {{ 'a' is not string }} {{ not 'a' is string }}")
    # ---- string methods ------------------------------------------------------------------------
    add("str/methods", "{{ s.startswith('<tool') }} {{ s.endswith(('x', '>')) }} [{{ s.strip('<>') }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] {{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  x  y '.split(none, 1) }} {{ s.replace('tool', 'T') }} {{ 'ab'.upper() }}{{ 'AB'.lower() }} {{ \"they're 1st\".title() }} {{ 'hELLO'.capitalize() }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ ', '.join(['a', 'b']) }} {{ '{} and {x}'.format(1, x='two') }} {{ 'a\nb\r\nc'.splitlines() }} {{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' '.isspace() }} {{ 'pre_x'.removeprefix('pre_') }}", s="<tool_response>")
    add("str/qwen_think_split", "{% set c = content %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ '</think>' in c }}", content="<think>\nreason\n</think>\n\nanswer")
    add("str/percent", "{{ '%s is %d years (%.1f%%)' % ('Ann', 31, 12.345) }} {{ '%r' % 'x' }} {{ 'x%sy' % 5 }}")
    add("str/unicode", "{{ 'héllo wörld'.upper() }} {{ 'ÀÉÎ'.lower() }} {{ 'ab😀c'[2] }} {{ 'ab😀c' | length }} {{ '中文' ~ 'テキスト' }}")
    # ---- globals ---------------------------------------------------------------------------------
    add("glob/range", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }} {{ range(0) | list }} {% for i in range(2, 5) %}{{ i }}{% endfor %}")
    add("glob/dict", "{{ dict(a=1, b='x') }} {{ dict(a=1).a }}")
    add("glob/context_overrides", "{{ messages | length }} {% set messages = messages[1:] %}{{ messages | length }}", messages=MSGS_BASIC)
    # ---- errors (both must raise) ---------------------------------------------------------------
    add("err/raise_exception", "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with a user turn, got ' ~ messages[0].role) }}{% endif %}", messages=MSGS_BASIC)
    add("err/undefined_attr_of_undefined", "{{ u.x }}")
    add("err/undefined_method_call", "{{ messages[0].nope.startswith('x') }}", messages=MSGS_BASIC)
    add("err/str_plus_int", "{{ 'a' + 1 }}")
    add("err/undefined_plus", "{{ 'a' + u }}")
    add("err/division_by_zero", "{{ 1 / 0 }}")
    add("err/compare_types", "{{ 1 < 'a' }}")
    add("err/unknown_filter", "{{ 'a' | nosuchfilter }}")
    add("err/unclosed_tag", "{% if true %}x")
    add("err/unknown_tag", "{% frobnicate %}")
    add("err/unclosed_variable", "{{ 'x' ")
    add("err/bad_expression", "{{ 1 + }}")
    add("err/namespace_set_on_dict", "{% set d = {} %}{% set d.x = 1 %}")
    add("err/unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}")
    add("err/range_too_big", "{{ range(200000) | length }}")
    add("err/not_callable", "{{ 'x'() }}")
    add("err/iterate_none", "{% for x in none %}{% endfor %}")
    add("err/length_of_int", "{{ 3 | length }}")
    add("err/macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}")
    add("err/tojson_undefined", "{{ u | tojson }}")
    return c


def chat_cases():
    """(name, template_ref or template, context) for whole chat templates."""
    c = []
    qwen_contexts = [
        ("basic", {"messages": MSGS_BASIC, "add_generation_prompt": True}),
        ("no_system", {"messages": MSGS_BASIC[1:], "add_generation_prompt": False}),
        ("tools", {"messages": MSGS_TOOLS, "tools": [WEATHER_TOOL, SEARCH_TOOL], "add_generation_prompt": True}),
        ("tools_with_system", {"messages": MSGS_TOOLS_STRING_ARGS, "tools": [SEARCH_TOOL], "add_generation_prompt": False}),
        ("string_arguments_no_tools", {"messages": MSGS_TOOLS_STRING_ARGS, "tools": None, "add_generation_prompt": True}),
        ("reasoning", {"messages": MSGS_REASONING, "add_generation_prompt": True, "enable_thinking": True}),
        ("no_thinking", {"messages": MSGS_BASIC, "add_generation_prompt": True, "enable_thinking": False}),
        ("tool_first", {"messages": [{"role": "tool", "content": "orphan"}, {"role": "user", "content": "ok"}],
                        "add_generation_prompt": True}),
    ]
    for ref in ("qwen3", "qwen2.5"):
        for name, ctx in qwen_contexts:
            ctx = dict(ctx)
            ctx["eos_token"] = "<|im_end|>"
            c.append((f"{ref}/{name}", {"template_ref": ref}, ctx))
    llama = {"template": LLAMA31_STYLE}
    base = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "date_string": "26 Jul 2024"}
    c.append(("llama31/basic", llama, {**base, "messages": MSGS_BASIC, "add_generation_prompt": True}))
    c.append(("llama31/tools_in_user", llama, {**base, "messages": [{"role": "user", "content": "  Weather in Zürich?  "}],
                                                "tools": [WEATHER_TOOL], "add_generation_prompt": True}))
    c.append(("llama31/tools_in_system", llama, {**base, "messages": MSGS_TOOLS, "tools": [WEATHER_TOOL, SEARCH_TOOL],
                                                  "tools_in_user_message": False, "add_generation_prompt": False}))
    c.append(("llama31/builtin_tools", llama, {**base, "builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"],
                                                "messages": [
                                                    {"role": "system", "content": "Use tools."},
                                                    {"role": "user", "content": "Search for rlhost"},
                                                    {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "rlhost", "lang": "en"}}}]},
                                                    {"role": "ipython", "content": {"results": ["a", "b"]}},
                                                    {"role": "tool", "content": "plain text result"},
                                                ], "add_generation_prompt": True}))
    c.append(("llama31/custom_tools_no_messages_error", llama, {**base, "messages": [], "custom_tools": [SEARCH_TOOL]}))
    c.append(("llama31/two_tool_calls_error", llama, {**base, "messages": [
        {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {}}}, {"function": {"name": "b", "arguments": {}}}]}]}))
    return c


def load_ref(ref):
    path = os.path.join(DATA, "tokenizers", "qwen", "tokenizer_config.json" if ref == "qwen3" else "qwen2.5/tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def main():
    env = make_env()
    rows = []
    for name, template, ctx in template_cases():
        rows.append(({"name": name, "template": template}, template, ctx))
    for name, which, ctx in chat_cases():
        template = which.get("template") or load_ref(which["template_ref"])
        rows.append(({"name": name, **which}, template, ctx))
    out_path = os.path.join(HERE, "chat_template_golden.jsonl")
    names = set()
    with open(out_path, "w", encoding="utf-8") as out:
        for head, template, ctx in rows:
            assert head["name"] not in names, head["name"]
            names.add(head["name"])
            row = dict(head)
            row["context"] = ctx
            try:
                row["output"] = env.from_string(template).render(**ctx)
            except Exception as e:  # the C++ side must raise as well
                row["error"] = f"{type(e).__name__}: {e}"
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} cases to {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
