#!/usr/bin/env python3
"""The Python client against a real `zmoe serve`: streaming, collect, abort, health, metrics, errors."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
import zmoe_client  # noqa: E402


def main(endpoint):
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
        m = c.metrics()
        assert "frontend" in m and "engine_core" in m, list(m)
    print("python client e2e: ok")


if __name__ == "__main__":
    main(sys.argv[1])
