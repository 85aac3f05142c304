#!/usr/bin/env python3
"""Reference renderings of chat templates by jinja2, configured as Hugging Face's apply_chat_template does.

  scripts/make_chat_fixtures.py
      writes tests/fixtures/chat/conversations.jsonl and tests/fixtures/chat/expected/<template>.jsonl (one line
      per conversation: {"prompt": "..."}, {"error": "..."} when the template raises, or {"error": "...",
      "field": "messages[i]..."} when a message is refused), for the templates of
      third_party/tokenizers/{qwen3,deepseek_v3,llama3} and tests/fixtures/chat/templates/*.
  scripts/make_chat_fixtures.py --compare build/bin/zmoe [--conversations FILE | --random N --seed S]
      renders FILE (default: the committed conversations), or N random conversations, with jinja2 and with
      `zmoe apply-chat-template` for every template and prints how many renderings are equal character for
      character (a template error counts as equal when both raise).

jinja2 set-up (as transformers' chat template utilities): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with the loopcontrols extension and a {% generation %} block, tojson = json.dumps(x,
ensure_ascii=False, indent=..., separators=..., sort_keys=...), raise_exception and strftime_now globals;
render(messages=, tools=, documents=None, add_generation_prompt=, **special_tokens, **chat_template_kwargs).
strftime_now reads a fixed clock (2026-01-15 10:30 local time) so that fixtures are stable; the C++ test fixes
its clock the same way.

Before rendering, the messages are normalised as vLLM's OpenAI server does (vllm/entrypoints/chat_utils.py,
parse_chat_messages and _postprocess_messages), with zmoe's two deviations and refusals (docs/chat_templates.md):
normalize() below is the reference for frontend/chat_messages.cpp, message_shape() for
frontend/chat_template_shape.cpp.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
except ImportError:  # ctest reads 77 as "skipped"
    print("jinja2 is not installed (Debian: python3-jinja2)", file=sys.stderr)
    sys.exit(77)
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat")
FIXED_NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)
SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def template_dirs():
    dirs = [(n, os.path.join(ROOT, "third_party", "tokenizers", n)) for n in ("qwen3", "deepseek_v3", "llama3")]
    tdir = os.path.join(FIXTURES, "templates")
    dirs += [(n, os.path.join(tdir, n)) for n in sorted(os.listdir(tdir))]
    return dirs


class GenerationBlock(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers' AssistantTracker, untracked)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def load(tokenizer_dir):
    config = {}
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    special = {}
    for name in SPECIAL:
        tok = config.get(name)
        if isinstance(tok, dict):
            tok = tok.get("content")
        if isinstance(tok, str):
            special[name] = tok
    jinja_path = os.path.join(tokenizer_dir, "chat_template.jinja")
    if os.path.exists(jinja_path):
        with open(jinja_path, encoding="utf-8") as f:
            source = f.read()
    else:
        source = config["chat_template"]
    return source, special


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- message shape of a template (frontend/chat_template_shape.cpp) ----

def _accesses(node, var, key=None):
    """`var`, or `var.key` / `var['key']` when key is given, seen through filters, tests and slices."""
    if isinstance(node, (nodes.Filter, nodes.Test)):
        return node.node is not None and _accesses(node.node, var, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _accesses(node.node, var, key)
    if key is None:
        return isinstance(node, nodes.Name) and node.name == var
    if isinstance(node, nodes.Getattr):
        return node.attr == key and isinstance(node.node, nodes.Name) and node.node.name == var
    if isinstance(node, nodes.Getitem):
        return (isinstance(node.node, nodes.Name) and node.node.name == var and isinstance(node.arg, nodes.Const)
                and node.arg.value == key)
    return False


def _is_arguments(node):
    return ((isinstance(node, nodes.Getattr) and node.attr == "arguments") or
            (isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "arguments"))


def message_shape(env, source):
    """{"content": "string"|"openai", "null_content": bool, "string_arguments": bool} of a template:
    content "openai" when a for-loop iterates over a message's content (vLLM's auto detection); null content kept
    when the template tests a message's content with `is none`; arguments as JSON text when the template
    concatenates an `arguments` attribute or item with + or ~."""
    ast = env.parse(source)
    sets = [a for a in ast.find_all(nodes.Assign) if isinstance(a.target, nodes.Name)]
    loops = list(ast.find_all(nodes.For))
    messages_vars = ["messages"]
    i = 0
    while i < len(messages_vars):
        for a in sets:
            if _accesses(a.node, messages_vars[i]) and a.target.name not in messages_vars:
                messages_vars.append(a.target.name)
        i += 1
    message_vars = []
    for loop in loops:
        if isinstance(loop.target, nodes.Name) and any(_accesses(loop.iter, v) for v in messages_vars):
            if loop.target.name not in message_vars:
                message_vars.append(loop.target.name)
    shape = {"content": "string", "null_content": False, "string_arguments": False}
    if any(_accesses(loop.iter, m, "content") for loop in loops for m in message_vars):
        shape["content"] = "openai"
    if any(t.name == "none" and _accesses(t.node, m, "content") for t in ast.find_all(nodes.Test)
           for m in message_vars):
        shape["null_content"] = True
    if (any(_is_arguments(n.left) or _is_arguments(n.right) for n in ast.find_all(nodes.Add)) or
            any(_is_arguments(n) for c in ast.find_all(nodes.Concat) for n in c.nodes)):
        shape["string_arguments"] = True
    return shape


# ---- message normalisation (frontend/chat_messages.cpp) ----

ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
TEXT_PARTS = ["text", "input_text", "output_text", "refusal"]
MEDIA_PARTS = ["image_url", "input_image", "image_pil", "image_embeds", "audio_url", "input_audio", "audio_embeds",
               "video_url", "file", "prompt_embeds"]


class MessageError(Exception):
    def __init__(self, field, reason):
        super().__init__(f"{field}: {reason}")
        self.field = field


def _part_texts(parts, field):
    texts = []
    for j, part in enumerate(parts):
        at = f"{field}[{j}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise MessageError(at, "a content part must be a string or an object")
        t = part.get("type")
        if not isinstance(t, str):
            raise MessageError(at + ".type", "a content part needs a string 'type'")
        if t in MEDIA_PARTS:
            raise MessageError(at + ".type", f"'{t}' content parts are not supported")
        if t not in TEXT_PARTS:
            raise MessageError(at + ".type", f"unknown content part type '{t}'")
        key = "refusal" if t == "refusal" else "text"
        for k in part:
            if k not in ("type", key):
                raise MessageError(f"{at}.{k}", "not supported")
        if not isinstance(part.get(key), str):
            raise MessageError(f"{at}.{key}", "must be a string")
        texts.append(part[key])
    return texts


def _content(msg, role, field, shape):
    c = msg.get("content")
    openai = shape["content"] == "openai"
    if c is None:
        if shape["null_content"]:
            return None
        return [] if openai and role != "tool" else ""
    if isinstance(c, str):
        texts = [c]
    elif isinstance(c, list):
        texts = _part_texts(c, field + ".content")
    else:
        raise MessageError(field + ".content", "must be a string, a list of content parts, or null")
    if not openai:  # vLLM's string format: the non-empty texts joined
        return "\n".join(t for t in texts if t)
    if role == "tool":  # vLLM: a tool result of text parts is one string
        return "\n".join(texts)
    return [{"type": "text", "text": t} for t in texts]


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


def _arguments(fn, field, as_text):
    a = fn.get("arguments")
    value = {}
    if a is None:
        pass
    elif isinstance(a, str):
        if a.strip(" \t\r\n"):
            try:
                value = json.loads(a, parse_constant=_no_constants)
            except ValueError as e:
                raise MessageError(field, f"not valid JSON: {e}")
            if as_text:
                return a
    elif isinstance(a, (dict, list)):
        value = a
    else:
        raise MessageError(field, "must be a JSON string or an object")
    return json.dumps(value, ensure_ascii=False) if as_text else value


def _tool_calls(calls, field, shape):
    if not isinstance(calls, list):
        raise MessageError(field, "must be a list of tool calls")
    out = []
    for j, call in enumerate(calls):
        at = f"{field}[{j}]"
        if not isinstance(call, dict):
            raise MessageError(at, "a tool call must be an object")
        copy = {}
        for key, v in call.items():
            if key == "id":
                if not isinstance(v, str):
                    raise MessageError(at + ".id", "must be a string")
            elif key == "type":
                if v != "function":
                    raise MessageError(at + ".type", "only 'function' tool calls are supported")
            elif key == "function":
                if not isinstance(v, dict):
                    raise MessageError(at + ".function", "must be an object")
                fn = {}
                for fk, fv in v.items():
                    if fk == "name":
                        if not isinstance(fv, str):
                            raise MessageError(at + ".function.name", "must be a string")
                        fn["name"] = fv
                    elif fk == "arguments":
                        fn["arguments"] = _arguments(v, at + ".function.arguments", shape["string_arguments"])
                    else:
                        raise MessageError(f"{at}.function.{fk}", "not supported in a tool call")
                if "name" not in fn:
                    raise MessageError(at + ".function.name", "is required")
                if "arguments" not in fn:
                    fn["arguments"] = _arguments(v, at + ".function.arguments", shape["string_arguments"])
                copy[key] = fn
                continue
            else:
                raise MessageError(f"{at}.{key}", "not supported in a tool call")
            copy[key] = v
        if "function" not in copy:
            raise MessageError(at + ".function", "is required")
        out.append(copy)
    return out


def _string_field(msg, key, field):
    v = msg.get(key)
    if v is not None and not isinstance(v, str):
        raise MessageError(f"{field}.{key}", "must be a string")
    return v


def normalize(messages, shape):
    """The messages as the template receives them (vLLM's parse_chat_messages, zmoe's refusals)."""
    if not isinstance(messages, list):
        raise MessageError("messages", "must be a list of messages")
    out = []
    for i, msg in enumerate(messages):
        field = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise MessageError(field, "a message must be an object")
        role = msg.get("role")
        if not isinstance(role, str):
            raise MessageError(field + ".role", "a message needs a string role")
        if role not in ROLES:
            raise MessageError(field + ".role", f"unknown role '{role}'")
        assistant = role == "assistant"
        for key, v in msg.items():
            if key in ("role", "content", "name"):
                continue
            if assistant and key in ("tool_calls", "reasoning", "reasoning_content"):
                continue
            if role == "tool" and key == "tool_call_id":
                continue
            if assistant and key in ("refusal", "audio", "function_call") and v is None:
                continue
            if assistant and key == "annotations" and (v is None or v == []):
                continue
            raise MessageError(f"{field}.{key}", f"not supported in a '{role}' message")
        m = {"role": role, "content": _content(msg, role, field, shape)}
        if assistant:
            if msg.get("tool_calls") is not None:
                calls = _tool_calls(msg["tool_calls"], field + ".tool_calls", shape)
                if calls:
                    m["tool_calls"] = calls
            reasoning = _string_field(msg, "reasoning", field)
            legacy = _string_field(msg, "reasoning_content", field)
            if reasoning is not None and legacy is not None and reasoning != legacy:
                raise MessageError(field + ".reasoning_content", "differs from 'reasoning'")
            text = reasoning if reasoning is not None else legacy
            if text is not None:
                m["reasoning"] = text
                m["reasoning_content"] = text
        if role == "tool" and _string_field(msg, "tool_call_id", field) is not None:
            m["tool_call_id"] = msg["tool_call_id"]
        if _string_field(msg, "name", field) is not None:
            m["name"] = msg["name"]
        out.append(m)
    return out


def render(env, source, special, conv):
    kwargs = dict(special)
    kwargs.update(conv.get("chat_template_kwargs") or {})
    try:
        messages = normalize(conv["messages"], message_shape(env, source))
    except MessageError as e:  # refused before the template: record the field
        return {"error": f"MessageError: {e}", "field": e.field}
    try:
        return {"prompt": env.from_string(source).render(
            messages=messages, tools=conv.get("tools"), documents=None,
            add_generation_prompt=conv.get("add_generation_prompt", False), **kwargs)}
    except Exception as e:  # the template raised (raise_exception or a type error): record it
        return {"error": f"{type(e).__name__}: {e}"}


def tool(name, description, props, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


WEATHER = tool("get_weather", "Current weather for a city.",
               {"city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"])
SEARCH = tool("search", "Search the web — returns snippets (UTF-8: café, 東京).",
              {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 3}}, ["query"])


def conversations():
    u = lambda c: {"role": "user", "content": c}
    a = lambda c: {"role": "assistant", "content": c}
    s = lambda c: {"role": "system", "content": c}
    call = lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}}
    called = lambda id_, name, args: {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
    text = lambda t: {"type": "text", "text": t}
    convs = [
        {"messages": [u("Hello!")], "add_generation_prompt": True},
        {"messages": [u("Hello!")], "add_generation_prompt": False},
        {"messages": [s("You are a terse assistant."), u("What is 2+2?")], "add_generation_prompt": True},
        {"messages": [u("Hi"), a("Hello! How can I help?"), u("Tell me a joke."), a("Why did the GPU cross the road?"),
                      u("Why?")], "add_generation_prompt": True},
        {"messages": [s("  Be helpful.  \n"), u("  spaced question?  \n"), a(" spaced answer \n")],
         "add_generation_prompt": False},
        {"messages": [u("Unicode: café, naïve, 東京, emoji 🚀, quotes \"double\" and 'single', back\\slash, tab\there")],
         "add_generation_prompt": True},
        {"messages": [u("Multi\nline\n\nmessage"), a("Line one\nLine two")], "add_generation_prompt": True},
        {"messages": [u("What is 17*3?"), a("<think>\n17*3 = 51\n</think>\n\nIt is 51."), u("And 18*3?")],
         "add_generation_prompt": True},
        {"messages": [u("Solve x+1=2"), {"role": "assistant", "content": "x = 1",
                                         "reasoning_content": "Subtract one from both sides."}],
         "add_generation_prompt": False},
        {"messages": [u("Think about it"), a("<think>\nLet me see.\n</think>\n\nDone.")],
         "add_generation_prompt": False},
        {"messages": [u("Quick answer please")], "add_generation_prompt": True,
         "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": [u("Deep answer please")], "add_generation_prompt": True,
         "chat_template_kwargs": {"enable_thinking": True}},
        {"messages": [s("You can call tools."), u("Weather in Paris?")], "add_generation_prompt": True,
         "tools": [WEATHER, SEARCH]},
        {"messages": [u("Weather in Paris?"),
                      {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"})]},
                      {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}],
         "add_generation_prompt": True, "tools": [WEATHER]},
        {"messages": [u("Weather in Paris and Tokyo?"),
                      {"role": "assistant", "content": "Checking both.",
                       "tool_calls": [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Tokyo"})]},
                      {"role": "tool", "content": "21C"}, {"role": "tool", "content": "15C"},
                      a("Paris is 21C and Tokyo is 15C.")],
         "add_generation_prompt": False, "tools": [WEATHER]},
        {"messages": [u("Search for zmoe"),
                      {"role": "assistant", "content": None,
                       "tool_calls": [call("search", "{\"query\": \"zmoe\", \"top_k\": 2}")]},
                      {"role": "tool", "content": "result one"}, a("Found it.")],
         "add_generation_prompt": False, "tools": [SEARCH]},
        {"messages": [u("Search"), {"role": "assistant", "content": None,
                                     "tool_calls": [call("search", "{\"query\": \"a\"}"), call("search", "{\"query\": \"b\"}")]},
                      {"role": "tool", "content": "A"}, {"role": "tool", "content": "B"}],
         "add_generation_prompt": True, "tools": [SEARCH]},
        {"messages": [s("First system."), s("Second system."), u("Hi")], "add_generation_prompt": True},
        {"messages": [u("A"), u("B")], "add_generation_prompt": True},
        {"messages": [a("I start.")], "add_generation_prompt": False},
        {"messages": [u(""), a("")], "add_generation_prompt": True},
        {"messages": [u("<tool_response>\nnot really\n</tool_response>"), a("ok")], "add_generation_prompt": True},
        {"messages": [u("with kwargs"), a("sure")], "add_generation_prompt": True,
         "chat_template_kwargs": {"date_string": "01 Feb 2026", "tools_in_user_message": False}},
        {"messages": [s("sys"), u("Weather?"), {"role": "assistant", "content": "",
                      "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                      {"role": "tool", "content": "{\"t\": -3}"}, u("Thanks!")],
         "add_generation_prompt": True, "tools": [WEATHER], "chat_template_kwargs": {"tools_in_user_message": False}},
        {"messages": [u([{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}])],
         "add_generation_prompt": True},
        {"messages": [u("Numbers 1.5 2e10"), a("<think>\n</think>\n\nNo thought."), u("more?"),
                      a("<think>\nsecond\n</think>\n\nsecond answer")], "add_generation_prompt": True},
        # OpenAI message shapes (docs/chat_templates.md): content parts, null content with tool calls, tool results.
        {"messages": [u([{"type": "text", "text": "hi"}])], "add_generation_prompt": True},
        {"messages": [s([text("You are terse."), text("Answer in English.")]),
                      u([text("first"), text(""), "a plain string part", {"type": "input_text", "text": "last"}])],
         "add_generation_prompt": True},
        {"messages": [u("Will you?"), a([{"type": "refusal", "refusal": "I cannot help with that."}]), u([text("ok")])],
         "add_generation_prompt": True},
        # A full tool-call round trip as an OpenAI SDK sends it back (arguments as JSON text, ids, content null).
        {"messages": [s("You can call tools."), u("Weather in Paris?"),
                      {"role": "assistant", "content": None,
                       "tool_calls": [called("call_1", "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}")]},
                      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21}"},
                      a("It is 21°C in Paris.")],
         "add_generation_prompt": False, "tools": [WEATHER]},
        {"messages": [u("Weather in Paris?"),
                      {"role": "assistant", "content": None, "refusal": None, "annotations": [], "audio": None,
                       "function_call": None,
                       "tool_calls": [called("call_9", "get_weather", "{\"city\": \"Paris\"}")]},
                      {"role": "tool", "tool_call_id": "call_9", "content": [text("21C"), text("clear sky")]}],
         "add_generation_prompt": True, "tools": [WEATHER]},
        # Several calls in one turn, one with no arguments at all and one with empty ones; content absent.
        {"messages": [u("Search twice, then the weather"),
                      {"role": "assistant",
                       "tool_calls": [called("c1", "search", "{\"query\": \"zmoe\", \"top_k\": 2}"),
                                      called("c2", "search", "{\"query\": \"東京\"}"),
                                      {"id": "c3", "type": "function", "function": {"name": "get_weather"}},
                                      called("c4", "get_weather", "")]},
                      {"role": "tool", "tool_call_id": "c1", "name": "search", "content": "one"},
                      {"role": "tool", "tool_call_id": "c2", "name": "search", "content": "two"},
                      {"role": "tool", "tool_call_id": "c3", "content": "three"},
                      {"role": "tool", "tool_call_id": "c4", "content": ""},
                      a("Done.")],
         "add_generation_prompt": True, "tools": [WEATHER, SEARCH]},
        {"messages": [u("Solve"), {"role": "assistant", "content": "x = 1", "reasoning": "subtract one"}, u("again")],
         "add_generation_prompt": True},
        {"messages": [{"role": "developer", "content": "Be brief."}, u("Hi"), {"role": "user", "name": "bob", "content": "Hey"}],
         "add_generation_prompt": True},
        {"messages": [u("empty tool_calls"), {"role": "assistant", "content": "plain", "tool_calls": []}],
         "add_generation_prompt": True},
        # Refused messages: the error names the field.
        {"messages": [u([text("look:"), {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}])],
         "add_generation_prompt": True},
        {"messages": [u("hi"), {"role": "ipython", "content": "x"}], "add_generation_prompt": True},
        {"messages": [u([{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}])],
         "add_generation_prompt": True},
        {"messages": [u([{"type": "mystery", "text": "?"}])], "add_generation_prompt": True},
        {"messages": [u("hi"), {"role": "assistant", "content": None,
                                "tool_calls": [called("c1", "search", "{not json")]}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "hi", "tool_call_id": "c1"}], "add_generation_prompt": True},
        {"messages": [u([{"type": "text"}])], "add_generation_prompt": True},
        {"messages": [u("hi"), {"role": "assistant", "content": "no", "refusal": "I refuse."}],
         "add_generation_prompt": True},
    ]
    return convs


def random_conversations(n, seed):
    """Conversations drawn at random (roles, text with whitespace and Unicode, tool calls, reasoning, kwargs)."""
    import random
    rng = random.Random(seed)
    words = ["hello", "  padded ", "café", "東京", "🚀", "\"quoted\"", "it's", "line\nbreak", "\ttab", "<think>",
             "</think>", "x+1=2", "{\"json\": 1}", "", "back\\slash", "<tool_response>", "</tool_response>", "ünïcödé"]
    text = lambda: "".join(rng.choice(words) + rng.choice([" ", "", "\n", "\n\n"]) for _ in range(rng.randint(0, 6)))
    out = []
    for _ in range(n):
        msgs = []
        parts = lambda: [rng.choice([{"type": "text", "text": text()}, text()]) for _ in range(rng.randint(0, 3))]
        content = lambda: parts() if rng.random() < 0.3 else text()
        if rng.random() < 0.4:
            msgs.append({"role": "system", "content": content()})
        for turn in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": content()})
            if turn == 0 and rng.random() < 0.3:
                continue
            r = rng.random()
            if r < 0.25:
                args = {"city": rng.choice(["Paris", "Zürich", "東京"])}
                calls = [{"id": f"call_{k}", "type": "function", "function": {"name": "get_weather",
                          "arguments": args if rng.random() < 0.5 else json.dumps(args, ensure_ascii=False)}}
                         for k in range(rng.randint(1, 2))]
                msgs.append({"role": "assistant", "content": rng.choice(["", None, text()]), "tool_calls": calls})
                for c in calls:
                    msgs.append({"role": "tool", "tool_call_id": c["id"], "content": content()})
            elif r < 0.4:
                msgs.append({"role": "assistant", "content": text(), "reasoning_content": text()})
            elif r < 0.6:
                msgs.append({"role": "assistant", "content": "<think>\n" + text() + "\n</think>\n\n" + text()})
            else:
                msgs.append({"role": "assistant", "content": text()})
        conv = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6}
        if rng.random() < 0.4:
            conv["tools"] = rng.sample([WEATHER, SEARCH], rng.randint(1, 2))
        if rng.random() < 0.4:
            conv["chat_template_kwargs"] = {"enable_thinking": rng.random() < 0.5}
        out.append(conv)
    return out


def write_fixtures():
    convs = conversations()
    os.makedirs(os.path.join(FIXTURES, "expected"), exist_ok=True)
    with open(os.path.join(FIXTURES, "conversations.jsonl"), "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    env = make_env()
    for name, d in template_dirs():
        source, special = load(d)
        with open(os.path.join(FIXTURES, "expected", name + ".jsonl"), "w", encoding="utf-8") as f:
            for c in convs:
                f.write(json.dumps(render(env, source, special, c), ensure_ascii=False) + "\n")
    print(f"{len(convs)} conversations x {len(template_dirs())} templates written under {FIXTURES}")


def compare(zmoe, conv_file, num_random, seed):
    if num_random:
        convs = random_conversations(num_random, seed)
    else:
        with open(conv_file, encoding="utf-8") as f:
            convs = [json.loads(line) for line in f if line.strip()]
    env = make_env()
    equal = total = 0
    for name, d in template_dirs():
        source, special = load(d)
        ok = 0
        for i, c in enumerate(convs):
            want = render(env, source, special, c)
            with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as tmp:
                tmp.write(json.dumps(c, ensure_ascii=False) + "\n")
            p = subprocess.run([zmoe, "apply-chat-template", "--tokenizer", d, "--input", tmp.name,
                                "--now", FIXED_NOW.isoformat()], capture_output=True, text=True)
            os.unlink(tmp.name)
            if "prompt" in want:
                same = p.returncode == 0 and p.stdout.strip() != "" and json.loads(p.stdout) == want["prompt"]
            else:
                same = p.returncode != 0
            ok += same
            if not same:
                print(f"  DIFF {name} #{i}: jinja2={json.dumps(want, ensure_ascii=False)[:300]}\n"
                      f"       zmoe={p.stdout.strip()[:300]} {p.stderr.strip()[:200]}")
        print(f"{name}: {ok}/{len(convs)} equal")
        equal += ok
        total += len(convs)
    print(f"total: {equal}/{total} renderings equal to jinja2's")
    return equal == total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", metavar="ZMOE", help="compare `ZMOE apply-chat-template` with jinja2")
    ap.add_argument("--conversations", default=os.path.join(FIXTURES, "conversations.jsonl"))
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="with --compare: N random conversations instead of a file")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.compare:
        sys.exit(0 if compare(args.compare, args.conversations, args.random, args.seed) else 1)
    write_fixtures()


if __name__ == "__main__":
    main()
