#!/usr/bin/env python3
"""Client liveness with the Python client (run by tests/cli/client_liveness_test.cpp).

  python_client_liveness.py ENDPOINT STREAMS MAX_TOKENS LISTEN_S

Started before the server: waits for it through health() (heartbeating meanwhile), then reads STREAMS long streams
for LISTEN_S seconds and checks that none was ended by the server (finished ones have all MAX_TOKENS tokens; the rest
are aborted by this script after the window). Then starts two more, stops calling into the client for 3 s (the
server's heartbeat is 200 ms) and checks that both end with the server's error saying no heartbeat came."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
import zmoe_client  # noqa: E402


def wait_healthy(c):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if c.health(timeout=0.3)["status"] == "ok":
                return
        except zmoe_client.ZmoeError:
            pass
    raise AssertionError("the server did not become healthy within 60 s")


def long_stream(c, i, max_tokens):
    return c.generate(prompt_token_ids=[100 + i, 200 + i, 300 + i], max_tokens=max_tokens, temperature=0,
                      ignore_eos=True, request_id=f"pylong{i}", timeout=30)


def listen(c, num, max_tokens, listen_s):
    streams = [long_stream(c, i, max_tokens) for i in range(num)]
    tokens = {s.request_id: 0 for s in streams}
    done = {}
    start = time.monotonic()
    for s in streams:  # the others' deltas are filed meanwhile; each stream read in turn
        while s.request_id not in done and time.monotonic() - start < listen_s:
            d = next(s)  # a server-side end raises ZmoeError here: the test fails with its message
            tokens[s.request_id] += len(d.token_ids)
            if d.finished:
                done[s.request_id] = d.finish_reason
    listened = time.monotonic() - start
    for rid, reason in done.items():
        assert reason == "length", (rid, reason)
        assert tokens[rid] == max_tokens, (rid, tokens[rid])
    running = [s for s in streams if s.request_id not in done]
    assert listened >= listen_s or not running, listened
    assert any(tokens.values()), "no stream produced a token"
    for s in running:
        s.abort()
    for s in running:
        for d in s:
            if d.finished:
                assert d.finish_reason in ("abort", "length"), d
    print(f"listened {listened:.1f} s to {num} streams: {len(done)} finished, {len(running)} aborted by the client, "
          f"{sum(tokens.values())} tokens")


def stop_calling(c, max_tokens):
    streams = [long_stream(c, 100 + i, max_tokens) for i in range(2)]
    for _ in range(5):
        next(streams[0])
    time.sleep(3.0)  # no call into the client: no heartbeat
    for s in streams:
        try:
            for d in s:
                assert not d.finished, f"{s.request_id} finished instead of being ended"
            raise AssertionError(f"{s.request_id} ended without an error")
        except zmoe_client.ZmoeError as e:
            assert e.code == "aborted" and "no heartbeat" in str(e), e
    print("a client that stopped calling: both requests ended with the server's error")


def main(endpoint, num, max_tokens, listen_s):
    with zmoe_client.Client(endpoint, timeout=30, heartbeat_interval=0.2, heartbeat_max_missed=3) as c:
        wait_healthy(c)
        listen(c, num, max_tokens, listen_s)
        stop_calling(c, max_tokens)
    print("python client liveness: ok")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
