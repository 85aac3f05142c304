#!/usr/bin/env python3
"""The official `openai` Python SDK against a running zmoe gateway (zmoe serve --http-port, or zmoe api-server).

  python3 tests/gateway/openai_sdk_test.py --base-url http://127.0.0.1:8000/v1

Completion and chat completion, streamed and not, usage in the stream, n choices, and a 400 surfaced as the SDK's
BadRequestError. Exits 77 (skipped) when the `openai` package is not installed.
"""
import argparse
import sys

try:
    import openai
except ImportError:
    print("the openai package is not installed: skipped", file=sys.stderr)
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused")
    model = client.models.list().data[0].id

    c = client.completions.create(model=model, prompt="Hello", max_tokens=5, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert c.choices[0].finish_reason == "length", c
    assert c.usage.completion_tokens == 5, c.usage

    text = ""
    usage = None
    for chunk in client.completions.create(model=model, prompt="Hello", max_tokens=5, temperature=0, stream=True,
                                           stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
        if chunk.choices:
            text += chunk.choices[0].text
        if chunk.usage:
            usage = chunk.usage
    assert text == c.choices[0].text, (text, c.choices[0].text)
    assert usage is not None and usage.completion_tokens == 5, usage

    messages = [{"role": "user", "content": "Name a colour."}]
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.choices[0].message.role == "assistant", r
    streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model=model, messages=messages, max_tokens=4, temperature=0, stream=True, extra_body={"ignore_eos": True})
        if ch.choices)
    assert streamed == r.choices[0].message.content, (streamed, r.choices[0].message.content)

    # n choices, seeded: indices 0..n-1, usage over all of them.
    several = client.completions.create(model=model, prompt="Hello", max_tokens=3, temperature=1.0, seed=3, n=2,
                                        extra_body={"ignore_eos": True})
    assert sorted(ch.index for ch in several.choices) == [0, 1], several
    assert several.usage.completion_tokens == 6, several.usage

    try:
        client.completions.create(model=model, prompt="x", max_tokens=5, extra_body={"min_p": 2})
        raise AssertionError("min_p=2 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400
    print(f"openai SDK {openai.__version__}: completions, chat completions, streaming, n and errors OK")


if __name__ == "__main__":
    main()
