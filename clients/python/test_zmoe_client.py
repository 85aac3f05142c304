"""Tests of zmoe_client.py against a fake frontend (a ROUTER thread speaking the protocol of docs/protocol.md)."""

import os
import sys
import threading
import unittest

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zmoe_client  # noqa: E402
from zmoe_client import PROTOCOL_VERSION as V  # noqa: E402


class FakeFrontend(threading.Thread):
    """Echo-style generator: token i of a request = last prompt token + 1 + i (prompt text counts as token 0),
    text "<i>". Prompt "fail" gets an error reply, "hang" waits for an abort. It checks every request it gets
    has the documented shape, so the client's encoding is tested too."""

    def __init__(self):
        super().__init__(daemon=True)
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.stop_event = threading.Event()
        self.hanging = {}
        self.echo_heartbeats = True  # False: a frontend whose process hangs (it answers nothing any more)
        self.malformed = []
        self.seen = []
        self.api_key = ""  # non-empty: metrics needs a hello with it first (as the frontend asks of remote clients)
        self.keys = {}  # peer -> the key its last hello carried

    def send(self, peer, *msg):
        self.sock.send_multipart([peer, msgpack.packb([V, *msg], use_bin_type=True)])

    def run(self):
        while not self.stop_event.is_set():
            if not self.sock.poll(20):
                continue
            peer, frame = self.sock.recv_multipart()
            msg = msgpack.unpackb(frame, raw=False)
            self.seen.append(msg)
            if msg[0] != V:
                self.malformed.append(msg)
                continue
            kind, f = msg[1], msg[2:]
            if kind == zmoe_client.GENERATE:
                rid, prompt, max_tokens, temperature, top_p, top_k, seed, stop, ignore_eos, stream = f[:10]
                ok = (isinstance(rid, str) and isinstance(prompt, (str, list)) and isinstance(max_tokens, int)
                      and isinstance(temperature, (float, type(None))) and isinstance(top_p, (float, type(None)))
                      and isinstance(top_k, (int, type(None)))
                      and (seed is None or isinstance(seed, int)) and isinstance(stop, list)
                      and isinstance(ignore_eos, bool) and isinstance(stream, bool))
                if not ok:
                    self.malformed.append(msg)
                if prompt == "fail":
                    self.send(peer, zmoe_client.ERROR, rid, 1, "bad prompt")
                    continue
                if prompt == "hang":
                    self.hanging[rid] = peer
                    continue
                base = prompt[-1] if isinstance(prompt, list) and prompt else 0
                n_prompt = len(prompt) if isinstance(prompt, list) else 1
                ids = [base + 1 + i for i in range(max_tokens)]
                if stream:
                    for i, t in enumerate(ids):
                        last = i + 1 == max_tokens
                        self.send(peer, zmoe_client.DELTA, rid, [t], f"<{i}>", last, "length" if last else "",
                                  n_prompt, i + 1, [], "a field from the future")
                else:  # one final delta per sequence (n), sequence k's ids offset by 100 k
                    for k in range(f[19] if len(f) > 19 else 1):
                        self.send(peer, zmoe_client.DELTA, rid, [t + 100 * k for t in ids],
                                  "".join(f"<{i}>" for i in range(max_tokens)), True, "length", n_prompt, max_tokens,
                                  [], k, n_prompt - 1)  # cached_tokens: all but the last prompt token
            elif kind == zmoe_client.ABORT:
                peer_of = self.hanging.pop(f[0], None)
                if peer_of is not None:
                    self.send(peer_of, zmoe_client.DELTA, f[0], [], "", True, "abort", 1, 0)
            elif kind == zmoe_client.HEALTH:
                self.send(peer, zmoe_client.HEALTH_REPLY, f[0], "ok", "fake-moe", 2, 2, 0, 0, 1.5, "test", "")
            elif kind == zmoe_client.HEARTBEAT:
                if self.echo_heartbeats:
                    self.send(peer, zmoe_client.HEARTBEAT)
            elif kind == zmoe_client.METRICS:
                if self.api_key and self.keys.get(peer) != self.api_key:
                    self.send(peer, zmoe_client.ERROR, "", 12, "wrong API key")
                    continue
                self.send(peer, zmoe_client.METRICS_REPLY, f[0], '{"requests": 3}')
            elif kind == zmoe_client.HELLO:
                if len(f) != 1 or not isinstance(f[0], str):
                    self.malformed.append(msg)
                self.keys[peer] = f[0]
        self.sock.close(0)


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeFrontend()
        self.server.start()
        self.client = zmoe_client.Client(self.server.endpoint, timeout=5.0)

    def tearDown(self):
        self.client.close()
        self.server.stop_event.set()
        self.server.join(5)
        self.assertEqual(self.server.malformed, [], "the client sent a message outside the protocol")

    def test_streams_deltas(self):
        deltas = list(self.client.generate(prompt_token_ids=[10, 20], max_tokens=3, temperature=0))
        self.assertEqual([d.token_ids for d in deltas], [[21], [22], [23]])
        self.assertEqual([d.finished for d in deltas], [False, False, True])
        self.assertEqual(deltas[-1].finish_reason, "length")
        self.assertEqual(deltas[-1].completion_tokens, 3)
        self.assertEqual(deltas[-1].prompt_tokens, 2)

    def test_concurrent_streams_are_demultiplexed(self):
        a = self.client.generate("hello", max_tokens=4, seed=7, stop=["\n"])
        b = self.client.generate(prompt_token_ids=[100], max_tokens=2)
        cb = b.collect()  # a's deltas arrive meanwhile and wait in a's queue
        ca = a.collect()
        self.assertEqual(cb.token_ids, [101, 102])
        self.assertEqual(ca.token_ids, [1, 2, 3, 4])
        self.assertEqual(ca.text, "<0><1><2><3>")
        gen = [m for m in self.server.seen if m[1] == zmoe_client.GENERATE]
        # Unset sampling fields travel as nil: the server's defaults apply (docs/sampling.md).
        self.assertEqual(gen[0][2:], [a.request_id, "hello", 4, None, None, None, 7, ["\n"], False, True, "",
                                      [], None, 0.0, 0.0, None, None, [], 0, 1, "", ["", ""]])
        salted = self.client.generate(prompt_token_ids=[1], max_tokens=1, cache_salt="tenant")
        salted.collect()
        self.assertEqual([m for m in self.server.seen if m[1] == zmoe_client.GENERATE][-1][-2], "tenant")

    def test_structured_outputs_travel_as_kind_and_text(self):
        cases = [({"json": {"type": "object", "properties": {"b": {}, "a": {}}}},
                  ["json_schema", '{"type": "object", "properties": {"b": {}, "a": {}}}']),
                 ({"json": '{"type":"integer"}'}, ["json_schema", '{"type":"integer"}']),
                 ({"json_object": True}, ["json_object", ""]),
                 ({"regex": "[a-z]+"}, ["regex", "[a-z]+"]),
                 ({"choice": ["yes", "no"]}, ["choice", '["yes", "no"]']),
                 ({"grammar": 'root ::= "x"'}, ["grammar", 'root ::= "x"'])]
        for structured, wire in cases:
            self.client.generate(prompt_token_ids=[100], max_tokens=2, structured=structured).collect()
            gen = [m for m in self.server.seen if m[1] == zmoe_client.GENERATE]
            self.assertEqual(gen[-1][-1], wire)
        with self.assertRaises(ValueError):
            self.client.generate(prompt_token_ids=[5], structured={"regex": "a", "choice": ["a"]})
        with self.assertRaises(ValueError):
            self.client.generate(prompt_token_ids=[5], structured={"yaml": "a"})

    def test_n_sequences_end_after_each_finished(self):
        stream = self.client.generate(prompt_token_ids=[5], max_tokens=2, stream=False, n=3)
        outs = stream.collect_all()
        self.assertEqual([o.index for o in outs], [0, 1, 2])
        self.assertEqual([o.token_ids for o in outs], [[6, 7], [106, 107], [206, 207]])
        self.assertEqual([o.cached_tokens for o in outs], [0, 0, 0])
        outs = self.client.generate(prompt_token_ids=[5, 6, 7], max_tokens=1, stream=False).collect_all()
        self.assertEqual(outs[0].cached_tokens, 2)
        self.assertEqual(self.client._live, {})  # the request ended with its third sequence
        with self.assertRaises(ValueError):
            self.client.generate(prompt_token_ids=[5], n=3).collect()
        with self.assertRaises(ValueError):
            self.client.generate(prompt_token_ids=[5], n=17)

    def test_non_streaming(self):
        deltas = list(self.client.generate(prompt_token_ids=[5], max_tokens=3, stream=False))
        self.assertEqual(len(deltas), 1)
        self.assertEqual(deltas[0].token_ids, [6, 7, 8])

    def test_error_reply_raises(self):
        with self.assertRaises(zmoe_client.ZmoeError) as ctx:
            list(self.client.generate("fail"))
        self.assertEqual(ctx.exception.code, "invalid_argument")
        self.assertEqual(ctx.exception.message, "bad prompt")

    def test_abort(self):
        s = self.client.generate("hang", request_id="mine")
        self.assertEqual(s.request_id, "mine")
        with self.assertRaises(ValueError):
            self.client.generate("hang", request_id="mine")
        self.client.abort("mine")
        self.assertEqual(s.collect().finish_reason, "abort")

    def test_health_and_metrics(self):
        h = self.client.health()
        self.assertEqual(h["status"], "ok")
        self.assertEqual(h["num_workers"], 2)
        self.assertEqual(self.client.metrics(), {"requests": 3})

    def test_timeout(self):
        s = self.client.generate("hang", timeout=0.1)
        with self.assertRaises(zmoe_client.ZmoeError) as ctx:
            next(s)
        self.assertEqual(ctx.exception.code, "timeout")

    def test_heartbeats_keep_a_quiet_request_alive(self):
        # 3 missed = 0.6 s: wide enough that a loaded CI machine's scheduling never looks like a dead frontend.
        c = zmoe_client.Client(self.server.endpoint, timeout=5.0, heartbeat_interval=0.2)
        s = c.generate("hang", timeout=2.0)  # 10 intervals of silence from the request itself
        with self.assertRaises(zmoe_client.ZmoeError) as ctx:
            next(s)
        self.assertEqual(ctx.exception.code, "timeout")  # the frontend answered every heartbeat
        c.close()

    def test_dead_frontend_is_detected_by_heartbeat(self):
        self.server.echo_heartbeats = False
        c = zmoe_client.Client(self.server.endpoint, timeout=60.0, heartbeat_interval=0.05)
        s = c.generate("hang")
        with self.assertRaises(zmoe_client.ZmoeError) as ctx:
            next(s)
        self.assertEqual(ctx.exception.code, "peer_dead")  # not "timeout": the heartbeats went unanswered
        c.close()

    def test_api_key_hello_precedes_each_request(self):
        self.server.api_key = "k3y"
        c = zmoe_client.Client(self.server.endpoint, timeout=5.0, api_key="k3y")
        c.generate(prompt_token_ids=[1], max_tokens=1).collect()
        c.health()
        self.assertEqual(c.metrics(), {"requests": 3})
        kinds = [m[1] for m in self.server.seen if m[1] != zmoe_client.HEARTBEAT]
        H, G, Q, M = zmoe_client.HELLO, zmoe_client.GENERATE, zmoe_client.HEALTH, zmoe_client.METRICS
        self.assertEqual(kinds, [H, G, Q, H, M])  # health is open: no hello before it
        self.assertEqual([m[2] for m in self.server.seen if m[1] == H], ["k3y", "k3y"])
        c.close()
        # A wrong key: the refusal (an error naming no request) is raised by the waiting call.
        bad = zmoe_client.Client(self.server.endpoint, timeout=5.0, api_key="guess")
        with self.assertRaises(zmoe_client.ZmoeError) as ctx:
            bad.metrics()
        self.assertEqual(ctx.exception.code, "unauthenticated")
        bad.close()

    def test_argument_checks(self):
        with self.assertRaises(ValueError):
            self.client.generate()
        with self.assertRaises(ValueError):
            self.client.generate("x", prompt_token_ids=[1])


class DecodeTest(unittest.TestCase):
    def test_rejects_malformed_frames(self):
        for frame in [b"", b"\xc1", msgpack.packb({"a": 1}), msgpack.packb([2, 16]), msgpack.packb([V, 99]),
                      msgpack.packb([V, zmoe_client.DELTA, "r"])]:
            with self.assertRaises(zmoe_client.ZmoeError):
                zmoe_client._fields(frame, zmoe_client._REPLY_FIELDS)


if __name__ == "__main__":
    unittest.main()
