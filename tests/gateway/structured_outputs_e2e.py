#!/usr/bin/env python3
"""Structured outputs end to end: every constrained output must parse and validate.

  # against a running server (zmoe serve --http-port, or any OpenAI-compatible one):
  python3 tests/gateway/structured_outputs_e2e.py --base-url http://127.0.0.1:8000 --num-requests 500
  # or let it start one on the CPU demo checkpoint (what CTest runs, 60 requests):
  python3 tests/gateway/structured_outputs_e2e.py --zmoe build/bin/zmoe --tokenizer third_party/tokenizers/qwen3

Requests cycle over the 20 JSON schemas of bench/grammar/schemas (nested objects, arrays, enums, optional fields,
$ref, recursion, formats, patterns, bounds), json_object, regular expressions and choices, through both routes
(/v1/chat/completions, /v1/completions) and every way to ask (response_format, vLLM's structured_outputs, the older
guided_* fields). Every output that ends with finish_reason "stop" (the grammar completed and the model stopped) must
satisfy its constraint: JSON Schema outputs parse and validate (python3-jsonschema, formats checked where it has a
checker), json_object outputs parse to an object, regex outputs fullmatch, choice outputs are one of the choices.
Outputs cut by max_tokens cannot be complete; at most --max-truncated of them (a fraction) may be. Exits 1 on any
invalid output, or too many truncated ones.

Random weights write long strings and numbers; so that outputs finish within max_tokens, the tokens that close a
string, a number, an object or an array get a logit bias (--closing-bias; 0 turns it off) and repeats are penalised
(--repetition-penalty, and --frequency-penalty, which grows with each repeat: a random model can write one digit
token thousands of times). None of them moves a token past the grammar: a mask that let a wrong token through would fail the
checks all the same.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed (scripts/setup.sh): skipped", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Python's re and zmoe's regex dialect agree on these.
REGEXES = [
    r"[A-Z][a-z]{2,8} [0-9]{1,3}",
    r"(cat|dog|bird)s?",
    r"\d{3}-\d{4}",
    r"[a-z]{1,12}@[a-z]{1,12}\.(com|org)",
    r"(0|[1-9][0-9]{0,5})\.[0-9]{2}",
]
CHOICES = [["yes", "no", "maybe"], ["Paris", "London", "Tokyo", "New York"], ["positive", "negative", "neutral"]]
# Tokens that close a string (biased three times as much: inside a string, the others are content), that end the
# free part of a format (an e-mail's local part, a time's fraction: twice), and that end a number or close an object
# or an array (once).
QUOTE_CLOSERS = ['"', '",', '"}', '"]', '"},', '"}]', '"}}']
FORMAT_ENDERS = ['@', 'Z']
CLOSERS = ['}', ']', '},', '}]', ']}', '}}', ',', ']]', '],']


def post(base, path, body, timeout):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def closing_bias(base, bias):
    """{token id: bias} for the closing tokens that are one token each in the server's vocabulary."""
    if bias == 0:
        return {}
    out = {}
    for closers, b in ((QUOTE_CLOSERS, 3 * bias), (FORMAT_ENDERS, 2 * bias), (CLOSERS, bias)):
        for s in closers:
            status, r = post(base, "/tokenize", {"prompt": s, "add_special_tokens": False}, 30)
            if status == 200 and len(r.get("tokens", [])) == 1:
                out[str(r["tokens"][0])] = b
    return out


def load_schemas(directory):
    schemas = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            schemas.append((os.path.basename(path), json.load(f)))
    if not schemas:
        raise SystemExit(f"no schemas in {directory}")
    return schemas


def make_request(i, schemas, model, max_tokens, bias, repetition_penalty, frequency_penalty=0.0):
    """The i-th request: (route, body, kind, expectation)."""
    chat = i % 2 == 0
    slot = i % 10
    if slot < 7:
        name, schema = schemas[(i * 7 // 10 + i // 10) % len(schemas)]
        how = (i // 2) % 3
        if how == 0:
            field = {"response_format": {"type": "json_schema",
                                         "json_schema": {"name": name.split(".")[0], "schema": schema,
                                                         "strict": True}}}
        elif how == 1:
            field = {"structured_outputs": {"json": schema}}
        else:
            field = {"guided_json": schema}
        kind, expect = "json_schema:" + name, schema
    elif slot == 7:
        field = {"response_format": {"type": "json_object"}} if (i // 10) % 2 == 0 else {
            "structured_outputs": {"json_object": True}}
        kind, expect = "json_object", None
    elif slot == 8:
        pattern = REGEXES[(i // 10) % len(REGEXES)]
        field = {"structured_outputs": {"regex": pattern}} if (i // 10) % 2 == 0 else {"guided_regex": pattern}
        kind, expect = "regex", pattern
    else:
        choices = CHOICES[(i // 10) % len(CHOICES)]
        field = {"structured_outputs": {"choice": choices}} if (i // 10) % 2 == 0 else {"guided_choice": choices}
        kind, expect = "choice", choices
    body = {"model": model, "max_tokens": max_tokens, "temperature": 1.0, "seed": 1000 + i, "logit_bias": bias,
            "repetition_penalty": repetition_penalty}
    if frequency_penalty:
        body["frequency_penalty"] = frequency_penalty
    body.update(field)
    if chat:
        body["messages"] = [{"role": "user", "content": f"Request {i}: answer in the required format."}]
        return "/v1/chat/completions", body, kind, expect
    body["prompt"] = f"Request {i}:"
    return "/v1/completions", body, kind, expect


def check(kind, expect, text):
    """None when `text` satisfies the constraint, else why not."""
    if kind.startswith("json_schema:") or kind == "json_object":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            return f"not JSON: {e}"
        if kind == "json_object":
            return None if isinstance(value, dict) else "not an object"
        validator = jsonschema.Draft202012Validator(expect, format_checker=jsonschema.FormatChecker())
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        return None if not errors else f"invalid: {errors[0].message} at {list(errors[0].path)}"
    if kind == "regex":
        return None if re.fullmatch(expect, text) else f"does not fullmatch {expect!r}"
    return None if text in expect else f"not one of {expect}"


def run(base, args):
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        model = json.loads(r.read())["data"][0]["id"]
    bias = closing_bias(base, args.closing_bias)
    schemas = load_schemas(args.schemas)
    # Refusals first: a schema, regex or grammar that cannot be compiled is a 400 naming the problem.
    for body, needle in [({"structured_outputs": {"regex": "(a"}}, "regex"),
                         ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                             "type": "object", "patternProperties": {"a": {}}}}}}, "patternProperties"),
                         ({"structured_outputs": {"grammar": "root ::= missing"}}, "missing")]:
        body.update({"model": model, "prompt": "x", "max_tokens": 4})
        status, r = post(base, "/v1/completions", body, 60)
        msg = r.get("error", {}).get("message", "")
        if status != 400 or needle not in msg:
            print(f"FAIL: expected a 400 naming {needle!r}, got {status}: {msg}")
            return 1
    failures = []
    truncated = []
    by_kind = {}
    t0 = time.time()

    def one(i):
        route, body, kind, expect = make_request(i, schemas, model, args.max_tokens, bias, args.repetition_penalty,
                                                   args.frequency_penalty)
        status, r = post(base, route, body, args.timeout)
        if status != 200:
            return i, kind, f"HTTP {status}: {r}", ""
        choice = r["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        if choice["finish_reason"] == "length":
            return i, kind, "truncated", text
        if choice["finish_reason"] != "stop":
            return i, kind, f"finish_reason {choice['finish_reason']}", text
        return i, kind, check(kind, expect, text), text

    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        for i, kind, why, text in pool.map(one, range(args.num_requests)):
            group = kind.split(":")[0]
            ok, n = by_kind.get(group, (0, 0))
            by_kind[group] = (ok + (why is None), n + 1)
            if why == "truncated":
                truncated.append((i, kind, text))
            elif why is not None:
                failures.append((i, kind, why, text))
    elapsed = time.time() - t0
    for group, (ok, n) in sorted(by_kind.items()):
        print(f"{group:12s} {ok}/{n} valid")
    for i, kind, why, text in failures[:20]:
        print(f"FAIL request {i} ({kind}): {why}\n  output: {text[:300]!r}")
    for i, kind, text in truncated[:3]:
        print(f"cut by max_tokens: request {i} ({kind}): {text[:200]!r}...")
    total_ok = sum(ok for ok, _ in by_kind.values())
    print(f"{total_ok}/{args.num_requests} outputs valid, {len(failures)} invalid, {len(truncated)} cut by max_tokens "
          f"{args.max_tokens} (requests {[t[0] for t in truncated[:20]]}), in {elapsed:.1f} s")
    too_many = len(truncated) > args.max_truncated * args.num_requests
    if too_many:
        print(f"FAIL: more than {args.max_truncated:.0%} of the outputs were cut by max_tokens")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"parameters": vars(args), "num_requests": args.num_requests, "num_valid": total_ok, "elapsed_s": elapsed,
                       "num_invalid": len(failures), "num_truncated": len(truncated),
                       "by_kind": {k: {"valid": v[0], "total": v[1]} for k, v in by_kind.items()}}, f, indent=1)
    return 0 if not failures and not too_many else 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", help="a running server (else --zmoe starts one)")
    ap.add_argument("--zmoe", help="the zmoe binary: start `zmoe serve` on a demo checkpoint (or --model)")
    ap.add_argument("--model", help="with --zmoe: the checkpoint (default: a fresh `zmoe make-demo`)")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "third_party/tokenizers/qwen3"),
                    help="with --zmoe and no --model: the tokenizer make-demo pairs the checkpoint with")
    ap.add_argument("--num-requests", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--closing-bias", type=float, default=12.0)
    ap.add_argument("--repetition-penalty", type=float, default=1.3,
                    help="keeps random weights from repeating one token inside a string")
    ap.add_argument("--frequency-penalty", type=float, default=0.0,
                    help="subtracted from a token's logit once per earlier occurrence (OpenAI's frequency_penalty)")
    ap.add_argument("--max-truncated", type=float, default=0.1,
                    help="the fraction of outputs that may be cut by max_tokens (random weights ramble)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--schemas", default=os.path.join(ROOT, "bench/grammar/schemas"))
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args()
    if args.base_url:
        return run(args.base_url.rstrip("/").removesuffix("/v1"), args)
    if not args.zmoe:
        ap.error("give --base-url or --zmoe")
    if not args.model and not os.path.exists(os.path.join(args.tokenizer, "tokenizer.json")):
        print(f"no tokenizer at {args.tokenizer} (scripts/fetch_tokenizers.sh): skipped", file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if not model:
            model = os.path.join(tmp, "demo")
            subprocess.run([args.zmoe, "make-demo", "--out", model, "--tokenizer", args.tokenizer], check=True,
                           stdout=subprocess.DEVNULL)
        port, http_port = free_port(), free_port()
        proc = subprocess.Popen([args.zmoe, "serve", "--model", model, "--port", str(port), "--http-port",
                                 str(http_port), "--threads", "1"], stdout=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{http_port}"
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                if proc.poll() is not None:
                    print("zmoe serve exited", file=sys.stderr)
                    return 1
                try:
                    with urllib.request.urlopen(base + "/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
                time.sleep(0.3)
            else:
                print("the server did not become healthy", file=sys.stderr)
                return 1
            return run(base, args)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    sys.exit(main())
