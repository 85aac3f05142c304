"""Python client of a zmoe frontend: ZeroMQ (DEALER) + msgpack, as specified in docs/protocol.md.

    from zmoe_client import Client
    with Client("tcp://127.0.0.1:5555") as c:
        for delta in c.generate("The capital of France is", max_tokens=16, temperature=0):
            print(delta.text, end="", flush=True)
        print(c.health())

Needs only python3-zmq and python3-msgpack. One Client is used from one thread; it multiplexes any number of
concurrent request streams over its socket.
"""

import collections
import dataclasses
import itertools
import json
import os
import time

import msgpack
import zmq

PROTOCOL_VERSION = 1

# Message kinds (the second element of every message).
GENERATE, ABORT, HEALTH, METRICS, HEARTBEAT, HELLO = 1, 2, 3, 4, 5, 6
DELTA, ERROR, HEALTH_REPLY, METRICS_REPLY = 16, 17, 18, 19

# zmoe::errc, as carried in error messages.
ERROR_CODES = {
    0: "ok",
    1: "invalid_argument",
    2: "invalid_checkpoint",
    3: "unsupported",
    4: "io",
    5: "out_of_memory",
    6: "peer_dead",
    7: "aborted",
    8: "protocol",
    9: "internal",
    10: "duplicate_request",  # the id names a live request, which is left running: not that request's end
    11: "overloaded",
    12: "unauthenticated",  # a client not on the server's loopback without its API key, or with a wrong one
}
DUPLICATE_REQUEST = 10

MAX_FRAME_BYTES = 64 << 20
MAX_CHOICES = 16  # most sequences one request may ask for (n)


class ZmoeError(Exception):
    """An error reply from the server (code is a zmoe errc name), a timeout ("timeout") or a malformed reply."""

    def __init__(self, code, message, client_request_id=""):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.client_request_id = client_request_id


@dataclasses.dataclass
class Delta:
    client_request_id: str
    token_ids: list
    text: str
    finished: bool
    finish_reason: str  # "" while running, then "length" | "stop" | "abort" | "error"
    prompt_tokens: int
    completion_tokens: int
    # One per token_ids entry when the request asked for logprobs:
    # {"logprob": float, "top_ids": [int], "top_logprobs": [float]}.
    logprobs: list = dataclasses.field(default_factory=list)
    index: int = 0  # which of the request's n sequences (completion_tokens counts that sequence's tokens)
    cached_tokens: int = 0  # prompt tokens the server's prefix cache served


@dataclasses.dataclass
class Completion:
    client_request_id: str
    token_ids: list
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    logprobs: list = dataclasses.field(default_factory=list)
    index: int = 0
    cached_tokens: int = 0


def _structured_field(structured):
    """The wire's [kind, text] of a structured-output constraint (["", ""] for none)."""
    if not structured:
        return ["", ""]
    if len(structured) != 1:
        raise ValueError("structured: give exactly one of json, json_object, regex, choice, grammar")
    (key, value), = structured.items()
    if key == "json":
        return ["json_schema", value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)]
    if key == "json_object":
        return ["json_object", ""] if value else ["", ""]
    if key == "regex":
        return ["regex", str(value)]
    if key == "choice":
        return ["choice", json.dumps([str(c) for c in value], ensure_ascii=False)]
    if key == "grammar":
        return ["grammar", str(value)]
    raise ValueError(f"structured: unknown kind {key!r}")


def _fields(frame, expected_kinds):
    """Decodes one frame into (kind, fields); raises ZmoeError("protocol") when malformed."""
    if len(frame) > MAX_FRAME_BYTES:
        raise ZmoeError("protocol", f"frame of {len(frame)} bytes")
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several exception types for bad input
        raise ZmoeError("protocol", f"undecodable frame: {e}") from None
    if not isinstance(msg, list) or len(msg) < 2:
        raise ZmoeError("protocol", "a message is an array [version, kind, fields...]")
    version, kind = msg[0], msg[1]
    if version != PROTOCOL_VERSION:
        raise ZmoeError("protocol", f"protocol version {version!r}, this client speaks {PROTOCOL_VERSION}")
    if kind not in expected_kinds:
        raise ZmoeError("protocol", f"unexpected message kind {kind!r}")
    fields = msg[2:]
    if len(fields) < expected_kinds[kind]:
        raise ZmoeError("protocol", f"kind {kind}: {len(fields)} fields, expected {expected_kinds[kind]}")
    return kind, fields  # fields beyond the known ones come from a newer server: ignored


_REPLY_FIELDS = {DELTA: 7, ERROR: 3, HEALTH_REPLY: 10, METRICS_REPLY: 2, HEARTBEAT: 0}


class Stream:
    """Iterator over the deltas of one request (of all its n sequences, told apart by Delta.index); it ends after
    each sequence's finished delta. Raises ZmoeError when the request fails or times out."""

    def __init__(self, client, request_id, timeout, n=1):
        self._client = client
        self.request_id = request_id
        self.n = n
        self._timeout = timeout
        self._unfinished = n
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        event = self._client._next_event(self.request_id, self._timeout)
        if isinstance(event, ZmoeError):
            self._done = True
            raise event
        if event.finished:
            self._unfinished -= 1
            self._done = self._unfinished == 0
        return event

    def abort(self):
        self._client.abort(self.request_id)

    def collect(self):
        """Consumes the rest of the stream and returns the whole output (of a request with n = 1)."""
        if self.n != 1:
            raise ValueError("a request with n > 1 has n outputs: use collect_all()")
        return self.collect_all()[0]

    def collect_all(self):
        """Consumes the rest of the stream and returns one Completion per sequence, by index."""
        out = [Completion(self.request_id, [], "", "", 0, 0, [], i) for i in range(self.n)]
        for d in self:
            c = out[d.index]
            c.token_ids.extend(d.token_ids)
            c.text += d.text
            c.logprobs.extend(d.logprobs)
            c.prompt_tokens, c.completion_tokens = d.prompt_tokens, d.completion_tokens
            c.cached_tokens = d.cached_tokens
            if d.finished:
                c.finish_reason = d.finish_reason
        return out


class Client:
    def __init__(self, endpoint, timeout=60.0, context=None, heartbeat_interval=1.0, heartbeat_max_missed=3,
                 api_key=None):
        """endpoint: the frontend's ROUTER, e.g. "tcp://127.0.0.1:5555". timeout: default seconds to wait for
        each reply (each delta of a stream). While in any call, the client heartbeats the frontend every
        heartbeat_interval seconds, whatever is arriving (the frontend ends the requests of a heartbeating client
        that then falls silent for 3 intervals, so read streams at least that often), and raises ZmoeError("peer_dead") when heartbeat_max_missed
        intervals pass without an answer (0 = never), so a dead frontend is noticed within seconds. api_key: the
        server's API key (default: ZMOE_API_KEY from the environment), needed when this client is not on the
        server's loopback; it is sent in a hello before each request."""
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._timeout = timeout
        self._ids = itertools.count()
        self._live = {}  # request id -> its sequences not yet finished
        self._events = collections.defaultdict(collections.deque)  # request id -> Delta | ZmoeError
        self._replies = {}  # tag -> health / metrics reply fields
        self._orphan_errors = collections.deque()  # errors naming no request
        self._hb_interval = heartbeat_interval
        self._hb_max_missed = heartbeat_max_missed
        self._last_received = time.monotonic()
        self._last_heartbeat = 0.0
        self._unanswered_since = None
        self._api_key = api_key if api_key is not None else os.environ.get("ZMOE_API_KEY", "")

    def close(self):
        self._sock.close(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, kind, *fields):
        # The hello (API key) goes before every request that needs it: a reconnected socket is a new client.
        if self._api_key and kind in (GENERATE, ABORT, METRICS):
            self._sock.send(msgpack.packb([PROTOCOL_VERSION, HELLO, self._api_key], use_bin_type=True))
        self._sock.send(msgpack.packb([PROTOCOL_VERSION, kind, *fields], use_bin_type=True))

    def generate(self, prompt=None, prompt_token_ids=None, *, max_tokens=16, temperature=None, top_p=None,
                 top_k=None, seed=None, stop=(), ignore_eos=False, stream=True, request_id=None, timeout=None,
                 messages=None, add_generation_prompt=True, tools=None, chat_template_kwargs=None,
                 stop_token_ids=(), logprobs=None, presence_penalty=0.0, frequency_penalty=0.0,
                 repetition_penalty=None, min_p=None, logit_bias=None, min_tokens=0, n=1, cache_salt=None,
                 structured=None):
        """Starts a request (text prompt, prompt_token_ids or chat messages, exactly one) and returns a Stream of its
        deltas. messages: the server renders them with the model's chat template (with tools and
        chat_template_kwargs). stream=False: the server sends one final delta holding everything. Sampling
        parameters are vLLM's (docs/sampling.md); None leaves the choice to the server: the model's
        generation_config.json, else vLLM's defaults (temperature 1, top_p 1, top_k off, min_p off,
        repetition_penalty 1). logit_bias: {token id: bias}. logprobs=k: each delta carries, per token, its logprob
        and the k most likely tokens' logprobs. n: sequences from the prompt (sequence i seeded seed + i); the
        stream's deltas name theirs in Delta.index, and it ends once all n have finished. cache_salt: only requests
        with the same salt share the server's prefix cache (Delta.cached_tokens: prompt tokens it served).
        structured: constrain the output, one of {"json": schema (a dict or its JSON text)}, {"json_object": True},
        {"regex": pattern}, {"choice": [strings]}, {"grammar": EBNF text} (docs/structured_outputs.md); a constraint
        that does not compile fails the request with invalid_argument."""
        if sum(x is not None for x in (prompt, prompt_token_ids, messages)) != 1:
            raise ValueError("give exactly one of prompt, prompt_token_ids and messages")
        chat = ""
        if messages is not None:
            req = {"messages": list(messages), "add_generation_prompt": bool(add_generation_prompt)}
            if tools is not None:
                req["tools"] = list(tools)
            if chat_template_kwargs is not None:
                req["chat_template_kwargs"] = dict(chat_template_kwargs)
            chat = json.dumps(req, ensure_ascii=False)
            prompt = ""
        request_id = request_id if request_id is not None else f"py{next(self._ids)}"
        if not 1 <= int(n) <= MAX_CHOICES:
            raise ValueError(f"n must be in [1, {MAX_CHOICES}]")
        if request_id in self._live:
            raise ValueError(f"request id {request_id!r} is in use")
        wire_prompt = prompt if prompt is not None else [int(t) for t in prompt_token_ids]

        def opt(v, kind):
            return None if v is None else kind(v)

        bias = [[int(t), float(b)] for t, b in (logit_bias or {}).items()]
        constraint = _structured_field(structured)
        self._send(GENERATE, request_id, wire_prompt, int(max_tokens), opt(temperature, float), opt(top_p, float),
                   opt(top_k, int), opt(seed, int), [str(s) for s in stop], bool(ignore_eos), bool(stream), chat,
                   [int(t) for t in stop_token_ids], opt(logprobs, int), float(presence_penalty),
                   float(frequency_penalty), opt(repetition_penalty, float), opt(min_p, float), bias, int(min_tokens),
                   int(n), str(cache_salt or ""), constraint)
        self._live[request_id] = int(n)
        return Stream(self, request_id, self._timeout if timeout is None else timeout, int(n))

    def abort(self, request_id):
        """Asks the server to stop a request; its stream then ends with finish_reason "abort"."""
        self._send(ABORT, request_id)

    def health(self, timeout=None):
        """The server's health as a dict (status, model, worker and request counts, uptime, version, detail)."""
        tag = f"h{next(self._ids)}"
        self._send(HEALTH, tag)
        f = self._wait_reply(tag, timeout)
        keys = ["tag", "status", "model", "num_workers", "num_workers_alive", "num_running", "num_waiting",
                "uptime_s", "version", "detail"]
        return dict(zip(keys, f[:10]))

    def metrics(self, timeout=None):
        """Every actor's metrics, as the parsed JSON object."""
        tag = f"m{next(self._ids)}"
        self._send(METRICS, tag)
        return json.loads(self._wait_reply(tag, timeout)[1])

    def _wait_reply(self, tag, timeout):
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        while tag not in self._replies:
            refused = [e for e in self._orphan_errors if e.code == "unauthenticated"]
            if refused:
                self._orphan_errors.clear()
                raise refused[0]
            if not self._receive(deadline):
                raise ZmoeError("timeout", f"no reply to {tag} within the timeout")
        return self._replies.pop(tag)

    def _next_event(self, request_id, timeout):
        deadline = time.monotonic() + timeout
        self._heartbeat_if_due(time.monotonic())  # also while buffered events are handed out
        while not self._events[request_id]:
            if request_id not in self._live:
                raise ZmoeError("invalid_argument", f"no live request {request_id!r}", request_id)
            if not self._receive(deadline):
                raise ZmoeError("timeout", f"request {request_id!r}: no reply within {timeout} s", request_id)
        return self._events[request_id].popleft()

    def _keep_alive(self, now):
        if self._hb_max_missed <= 0:
            return
        if self._unanswered_since is not None and now - self._unanswered_since >= self._hb_interval * self._hb_max_missed:
            self._unanswered_since = None
            self._last_received = now
            raise ZmoeError("peer_dead", f"the frontend stopped answering (no reply to heartbeats for "
                                         f"{self._hb_interval * self._hb_max_missed:g} s)")
        self._heartbeat_if_due(now)

    def _heartbeat_if_due(self, now):
        # On schedule, whatever is arriving: the frontend judges a client by what it sends, so a client busy
        # reading a long stream must still heartbeat. Any frame from the frontend answers (resets unanswered).
        if self._hb_max_missed > 0 and now - self._last_heartbeat >= self._hb_interval:
            self._send(HEARTBEAT)
            self._last_heartbeat = now
            if self._unanswered_since is None:
                self._unanswered_since = now

    def _receive(self, deadline):
        """Receives and files one reply; False once the deadline passed with nothing received."""
        while True:
            now = time.monotonic()
            self._keep_alive(now)
            left = max(0.0, deadline - now)
            capped = self._hb_max_missed > 0 and left > self._hb_interval
            if not self._sock.poll(int((self._hb_interval if capped else left) * 1000), zmq.POLLIN):
                if capped:
                    continue
                return False
            frames = self._sock.recv_multipart(zmq.NOBLOCK)
            self._last_received = time.monotonic()
            self._unanswered_since = None
            try:
                kind, f = _fields(frames[-1], _REPLY_FIELDS)
            except ZmoeError:
                continue  # a reply we cannot read; nothing to file it under
            if kind == DELTA:
                lps = [{"logprob": x[0], "top_ids": list(x[1]), "top_logprobs": list(x[2])}
                       for x in (f[7] if len(f) > 7 and isinstance(f[7], list) else [])]
                index = f[8] if len(f) > 8 and isinstance(f[8], int) else 0
                cached = f[9] if len(f) > 9 and isinstance(f[9], int) else 0
                d = Delta(f[0], list(f[1]), f[2], bool(f[3]), f[4], f[5], f[6], lps, index, cached)
                if d.finished and d.client_request_id in self._live:  # the request ends with its last sequence
                    self._live[d.client_request_id] -= 1
                    if self._live[d.client_request_id] <= 0:
                        del self._live[d.client_request_id]
                self._events[d.client_request_id].append(d)
            elif kind == ERROR:
                rid, code, message = f[0], f[1], f[2]
                err = ZmoeError(ERROR_CODES.get(code, f"error {code}"), message, rid)
                if rid and code == DUPLICATE_REQUEST:
                    self._orphan_errors.append(err)
                elif rid:
                    self._live.pop(rid, None)
                    self._events[rid].append(err)
                else:
                    self._orphan_errors.append(err)
            elif kind in (HEALTH_REPLY, METRICS_REPLY):
                self._replies[f[0]] = f
            return True
