"""Seeded malformed requests for the runtime's HTTP and gRPC servers, and a runner that sends
them to a real server and classifies every answer.

Used by ``tests/test_fuzz_server.py`` (a short run in the default suite) and
``bench/soak_server.py`` (the same generators for N minutes).

HTTP cases start from a small valid body of each JSON endpoint and mutate it: wrong types, huge
numbers, NaN/Infinity literals, deep nesting, lone surrogates and other odd unicode, unknown
fields, truncated JSON, random bytes, wrong content types and methods, over-limit sizes, raw
bytes that are not HTTP at all. gRPC cases are random field values through the real protobuf
classes, and random or mutated bytes on the wire through a raw channel. Token counts stay tiny
(or are invalid), so every well-formed case finishes in seconds on a CPU.

Bad outcomes (what the tests assert never happens): an HTTP 5xx or a stream event of an internal
error; a gRPC INTERNAL / UNKNOWN / DATA_LOSS status or GenerateError INTERNAL; "Traceback" in an
answer; a request that gets no answer within the timeout (a hang); a traceback in the server's
log (``LogWatch``); requests still active after the run (a leak).
"""
from __future__ import annotations

import copy
import http.client
import json
import logging
import random
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc

from sglc.wire.proto import fsm_pb2
from sglc.wire.proto import runtime_pb2 as pb

# ======================================= values =======================================
WEIRD = [None, True, False, 0, -1, 1, 7, 2**31, 2**63, 2**64 + 1, -2**63, 10**30, 1.5, -0.0, 1e308, 1e-308,
         "", "x", "3", "\u0000", "🙂", "é" * 3, "A" * 5000, [], [1], ["a"], [None], {}, {"a": 1}, [[1, 2]],
         [[]], {"type": "text", "text": 5}]
#: Token counts: tiny, invalid or over any context (never a long generation).
COUNTS = [-5, -1, 0, 1, 3, 2**31, 10**12, 1.5, "3", True, [], {}]
SMALL_REGEXES = ["[0-9]{1,3}", "(yes|no)", "[a-z]+", "((", "[", "a{2,1}", r"\d+\.\d*", "x*?", ""]
SCHEMAS = ['{"type": "integer"}', '{"type": "boolean"}', "not json"]
CONTENT_TYPES = ["text/plain", "", "application/x-www-form-urlencoded", "application/jsonx",
                 "application/json; charset=utf-8", "APPLICATION/JSON", "multipart/form-data; boundary=z"]
WORDS = ["Hello", "The", " capital", "of", "France", "\n", "is", "🙂", "Ünïcödé", "\t", "<|im_end|>",
         "<|im_start|>", "\u202e", "\u0000", "{", "}", "\\", '"', "0", "1e9"]


def rand_text(rng: random.Random, max_words: int = 8) -> str:
    if rng.random() < 0.1:
        return "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0x2FFF), rng.randint(0xE000, 0x10FFFF)]))
                       for _ in range(rng.randint(0, 30)))
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words)))


# ======================================= HTTP =======================================
@dataclass
class HttpCase:
    kind: str
    method: str = "POST"
    path: str = "/v1/completions"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    raw: bytes | None = None  # bytes sent as-is on a fresh connection (not HTTP)


def _completions_body(rng: random.Random) -> dict:
    body: dict[str, Any] = {"prompt": rand_text(rng), "max_tokens": rng.randint(0, 4),
                            "temperature": rng.choice([0, 0.7])}
    for key, value in (("n", 2), ("stream", True), ("logprobs", rng.randint(0, 3)), ("echo", True),
                       ("stop", ["\n", "."]), ("regex", rng.choice(SMALL_REGEXES)),
                       ("prompt", [rand_text(rng), rand_text(rng)]), ("prompt", [1, 2, 3]), ("seed", 7),
                       ("top_p", 0.5), ("top_k", 5), ("min_p", 0.1), ("frequency_penalty", 0.5),
                       ("stop_token_ids", [2]), ("ignore_eos", True), ("model", "default")):
        if rng.random() < 0.12:
            body[key] = value
    return body


def _chat_body(rng: random.Random) -> dict:
    messages = [{"role": rng.choice(["system", "user", "assistant", "tool", "x"]), "content": rand_text(rng)}
                for _ in range(rng.randint(1, 3))]
    body: dict[str, Any] = {"messages": messages, "max_tokens": rng.randint(0, 4), "temperature": 0}
    for key, value in (("n", 2), ("stream", True), ("logprobs", True), ("top_logprobs", 2), ("stop", "\n"),
                       ("response_format", {"type": "json_object"}),
                       ("response_format", {"type": "json_schema", "json_schema": {"schema": {"type": "integer"}}}),
                       ("response_format", {"type": "bogus"}), ("regex", rng.choice(SMALL_REGEXES))):
        if rng.random() < 0.12:
            body[key] = value
    return body


def _generate_body(rng: random.Random) -> dict:
    params: dict[str, Any] = {"max_new_tokens": rng.randint(0, 4), "temperature": rng.choice([0, 1.0])}
    for key, value in (("stop", ["\n"]), ("regex", rng.choice(SMALL_REGEXES)), ("top_k", 3),
                       ("json_schema", rng.choice(SCHEMAS)), ("ignore_eos", True), ("min_new_tokens", 1)):
        if rng.random() < 0.12:
            params[key] = value
    body: dict[str, Any] = {"text": rand_text(rng), "sampling_params": params}
    if rng.random() < 0.2:
        body["text"] = [rand_text(rng) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.5:
            body["sampling_params"] = [dict(params) for _ in body["text"]]
    if rng.random() < 0.1:
        del body["text"]
        body["input_ids"] = rng.choice([[1, 2, 3], [[1, 2], [3]], [10**9], [[]], [-1], [1, [2]]])
    for key, value in (("stream", True), ("return_logprob", True), ("top_logprobs_num", 2),
                       ("logprob_start_len", rng.choice([-2, -1, 0, 1, 10**6]))):
        if rng.random() < 0.15:
            body[key] = value
    return body


BODIES: dict[str, Callable[[random.Random], dict]] = {
    "/v1/completions": _completions_body, "/v1/chat/completions": _chat_body, "/generate": _generate_body}
COUNT_FIELDS = {"max_tokens", "max_new_tokens", "max_completion_tokens", "n"}
OTHER_ENDPOINTS = [("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/models"), ("GET", "/get_model_info"),
                   ("GET", "/get_server_info"), ("POST", "/flush_cache"), ("GET", "/flush_cache"),
                   ("GET", "/health_generate"), ("GET", "/nope"), ("DELETE", "/v1/completions"),
                   ("PUT", "/generate"), ("GET", "/v1/completions"), ("OPTIONS", "/v1/completions")]


def _weird(rng: random.Random, pool: list) -> Any:
    return copy.deepcopy(rng.choice(pool))  # NOTE: a shared list could end up inside itself


def _containers(value: Any, out: list) -> list:
    """Every dict and list inside `value` (to pick a place to mutate)."""
    if isinstance(value, (dict, list)):
        out.append(value)
        for item in (value.values() if isinstance(value, dict) else value):
            _containers(item, out)
    return out


def _mutate(rng: random.Random, body: dict) -> str:
    """Change one random place of the body in place; returns what was done."""
    target = rng.choice(_containers(body, []))
    if isinstance(target, dict):
        keys = list(target)
        op = rng.random()
        if keys and op < 0.6:
            key = rng.choice(keys)
            target[key] = _weird(rng, COUNTS if key in COUNT_FIELDS else WEIRD)
            return f"set {key}"
        if keys and op < 0.75:
            key = rng.choice(keys)
            if key not in COUNT_FIELDS:
                del target[key]
            return f"drop {key}"
        target[rng.choice(["unknown", "foo", "__proto__", "𝔘", "sampling_params", "model", "logit_bias"])] = \
            _weird(rng, WEIRD)
        return "add field"
    if target:
        target[rng.randrange(len(target))] = _weird(rng, WEIRD)
    else:
        target.append(_weird(rng, WEIRD))
    return "set item"


def _keep_short(path: str, body: dict) -> None:
    """A mutation may drop /generate's token count (the default is 128 tokens): put a tiny one back."""
    if path != "/generate":
        return
    params = body.get("sampling_params")
    if params is None or params == {}:
        body["sampling_params"] = {"max_new_tokens": 1}
    for item in params if isinstance(params, list) else [params]:
        if isinstance(item, dict):
            item.setdefault("max_new_tokens", 1)


def http_case(rng: random.Random) -> HttpCase:
    """One random malformed (or sometimes valid) HTTP request."""
    roll = rng.random()
    if roll < 0.08:
        method, path = rng.choice(OTHER_ENDPOINTS)
        return HttpCase("other endpoint", method, path, body=b"" if method == "GET" else b"{}",
                        headers={"Content-Type": "application/json"})
    if roll < 0.11:
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300)))
        return HttpCase("not HTTP", raw=rng.choice([junk, b"GET / HTTP/9.9\r\n\r\n", b"\r\n\r\n",
                                                    b"POST /generate HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                                                    b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                                    b"Content-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"]))
    path = rng.choice(list(BODIES))
    body = BODIES[path](rng)
    headers = {"Content-Type": "application/json"}
    kind = "valid"
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        kind = _mutate(rng, body)
    _keep_short(path, body)
    data = json.dumps(body).encode()
    roll = rng.random()
    if roll < 0.05:
        data, kind = data[:rng.randrange(max(1, len(data)))], "truncated JSON"
    elif roll < 0.09:
        data, kind = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))), "random bytes"
    elif roll < 0.12:
        depth = rng.choice([65, 1000, 100_000])
        data, kind = b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}", "deep nesting"
    elif roll < 0.16:
        literal = rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"9" * 5000])
        data, kind = data.replace(b"0", literal, 1) if b"0" in data else data[:-1] + b', "x": ' + literal + b"}", \
            "non-finite number"
    elif roll < 0.20:
        escape = rng.choice([b"\\ud800", b"\\udfff", b"\\ud83d", b"\\u0000", b"\\uffff"])
        data, kind = data.replace(b'": "', b'": "' + escape, 1), "odd unicode escape"
    elif roll < 0.24:
        headers["Content-Type"] = rng.choice(CONTENT_TYPES)
        kind = "content type"
    elif roll < 0.245:
        data, kind = json.dumps({"prompt": "word " * 250_000, "max_tokens": 1}).encode(), "prompt over 1 MiB"
    elif roll < 0.247:
        data, kind = b'{"prompt": "' + b"x" * (9 * 2**20) + b'"}', "body over 8 MiB"
    elif roll < 0.26:
        headers["Origin"] = rng.choice(["http://evil.example", "null", "file://"])
        kind = "foreign origin"
    if not headers["Content-Type"]:
        del headers["Content-Type"]
    return HttpCase(kind, "POST", path, headers, data)


# ======================================= gRPC =======================================
@dataclass
class GrpcCase:
    kind: str
    method: str
    request: bytes
    streaming: bool = False


def _prompt(rng: random.Random) -> pb.Prompt:
    p = pb.Prompt()
    roll = rng.random()
    if roll < 0.6:
        p.text = rand_text(rng)
    elif roll < 0.8:
        p.token_ids.ids.extend(rng.choice([[rng.randrange(49152) for _ in range(rng.randint(1, 12))],
                                           [rng.choice([-1, -2**31, 2**31 - 1, rng.randrange(2**31)]) for _ in range(rng.randint(1, 4))], []]))
    elif roll < 0.85:
        p.text = "word " * 250_000  # over max_prompt_bytes
    if rng.random() < 0.1:
        p.images.extend([rand_text(rng, 2) for _ in range(rng.randint(1, 3))])
        if rng.random() < 0.5:
            p.text = "<|sglc_image|> " + rand_text(rng)
    if rng.random() < 0.15:
        p.image_mode = rng.choice([0, 1, 2, 3, 99])
    return p


def _sampling(rng: random.Random) -> pb.SamplingParams:
    s = pb.SamplingParams(max_new_tokens=rng.choice([-5, 0, 1, 2, 4, 2**31 - 1]))
    doubles = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 0.5, 1.0, 2.5, 1e308]
    for name in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
        if rng.random() < 0.15:
            setattr(s, name, rng.choice(doubles))
    for name, values in (("min_new_tokens", [-1, 0, 1, 5]), ("top_k", [-2, -1, 0, 1, 2**31 - 1]),
                         ("seed", [-1, 0, 7, 2**63 - 1])):
        if rng.random() < 0.15:
            setattr(s, name, rng.choice(values))
    for name in ("ignore_eos", "skip_special_tokens"):
        if rng.random() < 0.1:
            setattr(s, name, rng.random() < 0.5)
    if rng.random() < 0.15:
        s.stop.extend(rng.choice([["\n"], [""], ["a"] * 40, ["z" * 2000], [rand_text(rng)]]))
    if rng.random() < 0.1:
        s.stop_token_ids.extend(rng.choice([[2], [-1], [2**31 - 1], [1] * 300]))
    roll = rng.random()
    if roll < 0.1:
        s.regex = rng.choice(SMALL_REGEXES)
    elif roll < 0.13:
        s.json_schema = rng.choice(SCHEMAS)
    elif roll < 0.15:
        s.fsm.CopyFrom(rng.choice([fsm_pb2.FSM(version=1, pattern="x", num_states=1000, num_classes=10**7),
                                   fsm_pb2.FSM(version=99), fsm_pb2.FSM(version=1, num_states=2**32 - 1)]))
    return s


def grpc_case(rng: random.Random) -> GrpcCase:
    """One random gRPC request: fields through the real message classes, sometimes mangled bytes."""
    roll = rng.random()
    if roll < 0.55:
        req = pb.GenerateRequest(prompt=_prompt(rng), sampling=_sampling(rng), stream=rng.random() < 0.4)
        if rng.random() < 0.1:
            req.rid = rng.choice(["", "r" * 300, rand_text(rng), "same-rid"])
        if rng.random() < 0.15:
            req.logprobs.return_logprob = rng.random() < 0.7
            req.logprobs.top_logprobs_num = rng.choice([-1, 0, 2, 21, 2**31 - 1])
            if rng.random() < 0.5:
                req.logprobs.logprob_start_len = rng.choice([-2, -1, 0, 3, 2**31 - 1])
        case = GrpcCase("Generate fields", "/sglc.runtime.Runtime/Generate", req.SerializeToString(), True)
    elif roll < 0.7:
        choices = rng.choice([[rand_text(rng, 3) for _ in range(rng.randint(1, 4))], [], [""], ["a"] * 129,
                              [" ok", "b" * 17_000]])
        req = pb.ScoreRequest(prompt=_prompt(rng), choices=choices, unconditional=rng.random() < 0.3)
        case = GrpcCase("Score fields", "/sglc.runtime.Runtime/Score", req.SerializeToString())
    elif roll < 0.78:
        case = GrpcCase("CachePrefix fields", "/sglc.runtime.Runtime/CachePrefix",
                        pb.CachePrefixRequest(prompt=_prompt(rng)).SerializeToString())
    elif roll < 0.86:
        name, msg = rng.choice([("Flush", pb.FlushRequest()), ("ModelInfo", pb.ModelInfoRequest()),
                                ("Health", pb.HealthRequest(check_generate=rng.random() < 0.3)),
                                ("Metrics", pb.MetricsRequest()), ("Nope", pb.FlushRequest())])
        case = GrpcCase(f"{name}", f"/sglc.runtime.Runtime/{name}", msg.SerializeToString())
    else:
        method, streaming = rng.choice([("/sglc.runtime.Runtime/Generate", True), ("/sglc.runtime.Runtime/Score", False),
                                        ("/sglc.runtime.Runtime/CachePrefix", False),
                                        ("/sglc.runtime.Runtime/Health", False)])
        case = GrpcCase("random bytes", method, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))),
                        streaming)
    if case.kind != "random bytes" and rng.random() < 0.15:  # mangle valid bytes: flip, cut, append
        data = bytearray(case.request)
        if data and rng.random() < 0.5:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif data:
            del data[rng.randrange(len(data)):]
        else:
            data += bytes(rng.getrandbits(8) for _ in range(8))
        if case.method.endswith("/Generate"):  # NOTE: keep it short even if the mangling lost the token count:
            data[:0] = b"\x1a\x02\x08\x02"  # field 3 (sampling) = {max_new_tokens: 2}, merged with a later one
        case.request, case.kind = bytes(data), case.kind + " (mangled)"
    return case


# ======================================= running =======================================
BAD_GRPC = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}


@dataclass
class Tally:
    """What the server answered (thread-safe counters and the first examples of each problem)."""

    requests: int = 0
    statuses: Counter = field(default_factory=Counter)  # "http 400", "grpc INVALID_ARGUMENT", ...
    server_errors: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, status: str, problem: str | None = None, where: list[str] | None = None) -> None:
        with self._lock:
            self.requests += 1
            self.statuses[status] += 1
            if problem is not None and where is not None:
                where.append(problem[:500])

    def summary(self) -> dict[str, Any]:
        clean = sum(v for k, v in self.statuses.items()
                    if k.startswith("http 4") or (k.startswith("grpc ") and k != "grpc OK"
                                                   and k.split()[1] not in {c.name for c in BAD_GRPC}))
        return {"requests": self.requests, "clean_errors": clean, "server_errors": len(self.server_errors),
                "tracebacks": len(self.tracebacks), "hangs": len(self.hangs),
                "statuses": dict(sorted(self.statuses.items())),
                "examples": {"server_errors": self.server_errors[:5], "tracebacks": self.tracebacks[:5],
                             "hangs": self.hangs[:5]}}


class LogWatch:
    """Collects every traceback the server logs (root, uvicorn and grpc loggers) or an uncaught
    thread exception prints, while active."""

    LOGGERS = ("", "uvicorn", "uvicorn.error", "grpc", "grpc._server")

    def __init__(self) -> None:
        self.tracebacks: list[str] = []
        watch = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                text = record.getMessage()
                if record.exc_info or "Traceback" in text:
                    err = record.exc_info[1] if record.exc_info else None
                    watch.tracebacks.append(f"{record.name}: {text[:300]}"
                                            + (f" ({type(err).__name__}: {err})" if err is not None else ""))

        self._handler = Handler(level=logging.DEBUG)
        self._previous_hook: Any = None

    def __enter__(self) -> LogWatch:
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self._handler)
        self._previous_hook = threading.excepthook
        threading.excepthook = lambda args: self.tracebacks.append(
            f"uncaught in thread {args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}")
        return self

    def __exit__(self, *exc: Any) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)
        threading.excepthook = self._previous_hook


def send_http(base: str, case: HttpCase, tally: Tally, timeout: float, headers: dict[str, str]) -> None:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    label = f"{case.kind}: {case.method} {case.path} {case.body[:120]!r}"
    if case.raw is not None:
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as sock:
                sock.sendall(case.raw)
                sock.shutdown(socket.SHUT_WR)
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
        except socket.timeout:
            tally.record("hang", f"no answer to raw bytes {case.raw[:80]!r}", tally.hangs)
            return
        except OSError:
            tally.record("http closed")
            return
        status = data.split(b" ", 2)[1].decode(errors="replace") if data.startswith(b"HTTP/") else "closed"
        _check_http(tally, status, data, label)
        return
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(case.method, case.path, body=case.body, headers={**case.headers, **headers})
        response = conn.getresponse()
        data = response.read()
        _check_http(tally, str(response.status), data, label)
    except socket.timeout:
        tally.record("hang", label, tally.hangs)
    except (ConnectionError, http.client.HTTPException, OSError):
        tally.record("http closed")  # e.g. a 413 answered before an 8 MiB body was sent
    finally:
        conn.close()


def _check_http(tally: Tally, status: str, data: bytes, label: str) -> None:
    if b"Traceback" in data:
        tally.record(f"http {status}", f"{label} -> {data[:300]!r}", tally.tracebacks)
    elif status.startswith("5"):
        tally.record(f"http {status}", f"{label} -> {status} {data[:300]!r}", tally.server_errors)
    elif b'"code": "internal"' in data or b'"code":"internal"' in data:
        tally.record(f"http {status} internal event", f"{label} -> {data[:300]!r}", tally.server_errors)
    else:
        tally.record(f"http {status}")


def send_grpc(channel: grpc.Channel, case: GrpcCase, tally: Tally, timeout: float, metadata: Any) -> None:
    label = f"{case.kind}: {case.method} {case.request[:120]!r}"
    try:
        if case.streaming:
            replies = list(channel.unary_stream(case.method)(case.request, timeout=timeout, metadata=metadata))
            for raw in replies:
                msg = pb.GenerateResponse.FromString(raw)
                if msg.WhichOneof("response") == "error" and msg.error.code == pb.GenerateError.INTERNAL:
                    tally.record("grpc GenerateError INTERNAL", f"{label} -> {msg.error.message}", tally.server_errors)
                    return
        else:
            channel.unary_unary(case.method)(case.request, timeout=timeout, metadata=metadata)
        tally.record("grpc OK")
    except grpc.RpcError as err:
        code, details = err.code(), err.details() or ""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.record("hang", label, tally.hangs)
        elif "Traceback" in details:
            tally.record(f"grpc {code.name}", f"{label} -> {details}", tally.tracebacks)
        elif code in BAD_GRPC:
            tally.record(f"grpc {code.name}", f"{label} -> {code.name}: {details}", tally.server_errors)
        else:
            tally.record(f"grpc {code.name}")


def run_fuzz(base: str, grpc_address: str, *, seconds: float, seed: int = 0, workers: int = 4,
             timeout: float = 60.0, api_key: str | None = None, max_requests: int | None = None) -> Tally:
    """Send random cases from `workers` threads for `seconds` (or `max_requests`); half HTTP, half gRPC."""
    tally = Tally()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
    channel = grpc.insecure_channel(grpc_address, options=[("grpc.max_send_message_length", 64 * 2**20)])
    stop_at = time.monotonic() + seconds

    def worker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        while time.monotonic() < stop_at and (max_requests is None or tally.requests < max_requests):
            if rng.random() < 0.5:
                send_http(base, http_case(rng), tally, timeout, headers)
            else:
                send_grpc(channel, grpc_case(rng), tally, timeout, metadata)

    try:
        with ThreadPoolExecutor(workers) as pool:
            for future in [pool.submit(worker, i) for i in range(workers)]:
                future.result()
    finally:
        channel.close()
    return tally
