#!/usr/bin/env python3
"""Reference renderings of chat templates by jinja2, configured as Hugging Face's apply_chat_template does.

  scripts/make_chat_fixtures.py
      writes tests/fixtures/chat/conversations.jsonl and tests/fixtures/chat/expected/<template>.jsonl (one line
      per conversation: {"prompt": "..."} or {"error": "..."} when the template raises), for the templates of
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


def render(env, source, special, conv):
    kwargs = dict(special)
    kwargs.update(conv.get("chat_template_kwargs") or {})
    try:
        return {"prompt": env.from_string(source).render(
            messages=conv["messages"], tools=conv.get("tools"), documents=None,
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
        if rng.random() < 0.4:
            msgs.append({"role": "system", "content": text()})
        for turn in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": text()})
            if turn == 0 and rng.random() < 0.3:
                continue
            r = rng.random()
            if r < 0.25:
                args = {"city": rng.choice(["Paris", "Zürich", "東京"])}
                calls = [{"type": "function", "function": {"name": "get_weather",
                          "arguments": args if rng.random() < 0.5 else json.dumps(args, ensure_ascii=False)}}
                         for _ in range(rng.randint(1, 2))]
                msgs.append({"role": "assistant", "content": rng.choice(["", None, text()]) , "tool_calls": calls})
                for _ in calls:
                    msgs.append({"role": "tool", "content": text()})
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
