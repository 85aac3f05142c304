#!/usr/bin/env python3
"""The Python client against a real `zmoe serve`: streaming, collect, abort, health, metrics, errors.

  python_client_e2e.py ENDPOINT [EXPECTED_N3]

EXPECTED_N3 (JSON): the token ids of the three sequences of prompt [17, 42, 311, 5, 90, 128], max_tokens 8,
temperature 1, seed 7, n 3, as the C++ client got them: checked against the Python client's n."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
import zmoe_client  # noqa: E402


def check_n(c, expected):
    stream = c.generate(prompt_token_ids=[17, 42, 311, 5, 90, 128], max_tokens=8, temperature=1.0, seed=7,
                        ignore_eos=True, n=3)
    outs = stream.collect_all()
    assert [o.index for o in outs] == [0, 1, 2], outs
    assert [o.token_ids for o in outs] == expected, ([o.token_ids for o in outs], expected)
    assert all(o.completion_tokens == 8 and o.finish_reason == "length" for o in outs), outs
    try:
        c.generate(prompt_token_ids=[5], n=3).collect()
        raise AssertionError("collect() of n = 3 accepted")
    except ValueError:
        pass


def main(endpoint, expected_n3=None):
    with zmoe_client.Client(endpoint, timeout=30) as c:
        h = c.health()
        assert h["status"] == "ok", h
        stream = c.generate(prompt_token_ids=[5, 6, 7, 8], max_tokens=10, temperature=0, ignore_eos=True)
        deltas = list(stream)
        ids = [t for d in deltas for t in d.token_ids]
        assert len(ids) == 10, ids
        assert deltas[-1].finished and deltas[-1].finish_reason == "length", deltas[-1]
        assert len(deltas) > 1, "expected several streamed deltas"
        again = c.generate(prompt_token_ids=[5, 6, 7, 8], max_tokens=10, temperature=0, ignore_eos=True).collect()
        assert again.token_ids == ids, (again.token_ids, ids)
        try:
            c.generate(prompt_token_ids=[5], max_tokens=0).collect()
            raise AssertionError("max_tokens=0 accepted")
        except zmoe_client.ZmoeError as e:
            assert "max_tokens" in str(e), e
        if expected_n3 is not None:
            check_n(c, expected_n3)
        m = c.metrics()
        assert "frontend" in m and "engine_core" in m, list(m)
    print("python client e2e: ok")


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else None)
