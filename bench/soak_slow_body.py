"""Slowloris against a runtime server: many connections that send their request slowly, then the
counts of what the server did with them, while /health and a real generation are timed meanwhile.

    python bench/soak_slow_body.py --connections 3000               # in-process server (default model)
    python bench/soak_slow_body.py --connections 3000 --limit max_body_seconds=10 --json bench/out/slow_body.json
    python bench/soak_server.py --mode slow-body --connections 3000    # the same, through the soak runner
    python bench/soak_slow_body.py --http http://127.0.0.1:30001 --header-seconds 10 --body-seconds 60
      (an external `sglc serve`: give its deadlines; its connection counts are not read)

Connections take turns being one of three kinds: ``silent`` (connects, sends nothing), ``headers``
(a request line, then one header byte every --drip seconds, never ending the headers) and ``body``
(complete headers with Content-Length, then one body byte every --drip seconds). Dripping keeps
each connection busy, so only a deadline on the whole headers / body closes it, not an idle timer.
Each connection counts as closed in time (the server closed it within its deadline + --slack s,
408 or silently), refused at once (429 / 503), closed early (before its deadline), or still open
(given up at deadline + --slack). The attack comes from --sources loopback addresses
(127.0.0.2, 127.0.0.3, ...), each under the per-client cap by default; --sources 1 shows the cap.
/health and the generations come from 127.0.0.1 (one of each before the attack too, for comparison on
a shared machine); the attack runs in a child process, so it does not share the server's GIL.

Exit status 1 when a connection stayed open past its deadline, one closed early, or /health or a
generation failed.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import multiprocessing
import resource
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("silent", "headers", "body")
BODY_BYTES = 1000  # the Content-Length a `body` connection announces (and never completes)


@dataclass
class Outcome:
    kind: str
    status: int | None = None  # the server's answer (408, 429, 503), None: closed without one
    opened: bool = False
    closed_after: float | None = None  # seconds from the start of the timed phase to the close
    still_open: bool = False


@dataclass
class Probe:
    """/health and generation timings taken while the attack runs."""
    health_ms: list[float] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)
    generation_s: list[float] = field(default_factory=list)
    generation_failures: list[str] = field(default_factory=list)


async def _connection(i: int, address: tuple[str, int], source: str, deadline_s: dict[str, float], drip: float,
                      slack: float, opening: asyncio.Semaphore) -> Outcome:
    kind = KINDS[i % len(KINDS)]
    out = Outcome(kind)
    host, port = address
    # NOTE: t0 is taken before the server can start the deadline (a lower bound: "closed early" is
    # never the client's fault); silent / headers: it runs from accepting the connection
    async with opening:
        t0 = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            return out
    out.opened = True
    head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    if kind == "body":
        t0 = time.monotonic()  # the body deadline runs from the end of the headers
        writer.write((head + f"Content-Length: {BODY_BYTES}\r\n\r\n").encode())
        drip_bytes = b"x" * BODY_BYTES
    elif kind == "headers":
        writer.write(b"POST /v1/completions HTTP/1.1\r\n")
        drip_bytes = b"X-Slow: " + b"z" * 100_000
    else:
        drip_bytes = b""
    give_up = t0 + deadline_s[kind] + slack
    sent = 0
    got = b""
    try:
        while True:
            wait = min(drip, give_up - time.monotonic())
            if wait <= 0:
                out.still_open = True
                break
            try:
                chunk = await asyncio.wait_for(reader.read(4096), wait)
            except asyncio.TimeoutError:
                if drip_bytes and sent < len(drip_bytes):
                    writer.write(drip_bytes[sent:sent + 1])
                    sent += 1
                continue
            if not chunk:
                break
            got += chunk
    except (ConnectionError, OSError):
        pass
    if not out.still_open:
        out.closed_after = time.monotonic() - t0
    if got.startswith(b"HTTP/1.1 "):
        out.status = int(got.split(b" ", 2)[1])
    writer.close()
    return out


def _probe(base: str, stop: threading.Event, probe: Probe, interval: float, tokens: int = 16) -> None:
    """/health every `interval` s and one greedy `tokens`-token completion after another, from 127.0.0.1."""
    host, port = base.removeprefix("http://").rsplit(":", 1)

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def health() -> None:
        while True:  # NOTE: at least once, even when `stop` is set already (the warm-up)
            t0 = time.monotonic()
            try:
                status, data = call("GET", "/health")
                if status != 200:
                    probe.health_failures.append(f"{status}: {data[:200]!r}")
            except OSError as err:
                probe.health_failures.append(f"{type(err).__name__}: {err}")
            probe.health_ms.append((time.monotonic() - t0) * 1000)
            if stop.wait(interval):
                return

    def generate() -> None:
        body = json.dumps({"prompt": "The capital of France is", "max_tokens": tokens, "temperature": 0}).encode()
        while True:
            t0 = time.monotonic()
            try:
                status, data = call("POST", "/v1/completions", body)
                if status != 200:
                    probe.generation_failures.append(f"{status}: {data[:200]!r}")
            except OSError as err:
                probe.generation_failures.append(f"{type(err).__name__}: {err}")
            probe.generation_s.append(time.monotonic() - t0)
            if stop.wait(0.2):
                return

    threads = [threading.Thread(target=f, daemon=True) for f in (health, generate)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _stopped_after_one() -> threading.Event:
    """An event already set: _probe makes one /health call and one generation, then returns."""
    stop = threading.Event()
    stop.set()
    return stop


def _quantiles(values: list[float], digits: int = 3) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def q(f: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(f * len(ordered)))], digits)
    return {"n": len(ordered), "p50": q(0.5), "p99": q(0.99), "max": round(ordered[-1], digits)}


async def _attack(address: tuple[str, int], connections: int, sources: list[str], deadline_s: dict[str, float],
                  drip: float, slack: float) -> list[Outcome]:
    opening = asyncio.Semaphore(256)
    return await asyncio.gather(*(
        _connection(i, address, sources[i % len(sources)], deadline_s, drip, slack, opening)
        for i in range(connections)))


def _attack_in_child(args: tuple, sender: Any) -> None:
    sender.send(asyncio.run(_attack(*args)))


def run_slow_body(base: str, *, connections: int, header_s: float, body_s: float, sources: int = 4,
                  drip: float = 1.0, slack: float = 3.0, early: float = 0.5, tokens: int = 16) -> dict[str, Any]:
    """The attack on the server at `base` (``http://host:port``); the counts as a dict."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    deadline_s = {"silent": header_s, "headers": header_s, "body": body_s}
    addresses = [f"127.0.0.{2 + k}" for k in range(sources)]
    probe, stop = Probe(), threading.Event()
    _probe(base, _stopped_after_one(), Probe(), 0.0, tokens)  # NOTE: warm-up: the first generation is not the attack's
    before = Probe()  # the same probes without the attack, on the same (possibly shared) machine
    _probe(base, _stopped_after_one(), before, 0.0, tokens)
    prober = threading.Thread(target=_probe, args=(base, stop, probe, 0.25, tokens), daemon=True)
    t0 = time.monotonic()
    prober.start()
    try:
        # NOTE: the attack runs in a child process, so its event loop does not take the in-process
        # server's GIL and the probes time the server, not the attacker
        context = multiprocessing.get_context("spawn")
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(target=_attack_in_child, name="slowloris", daemon=True,
                                args=(((host, int(port)), connections, addresses, deadline_s, drip, slack), sender))
        child.start()
        outcomes = receiver.recv()
        child.join()
    finally:
        stop.set()
        prober.join()
    refused = [o for o in outcomes if o.opened and o.status in (429, 503)]
    held = [o for o in outcomes if o.opened and o.status not in (429, 503)]
    in_time = [o for o in held if o.closed_after is not None and o.closed_after <= deadline_s[o.kind] + slack]
    closed_early = [o for o in in_time if o.closed_after < deadline_s[o.kind] - early]
    by_kind: dict[str, Any] = {}
    for kind in KINDS:
        mine = [o for o in held if o.kind == kind]
        by_kind[kind] = {"held": len(mine), "still_open": sum(o.still_open for o in mine),
                         "answers": dict(Counter(str(o.status) for o in mine if not o.still_open)),
                         "closed_after_s": _quantiles([o.closed_after for o in mine if o.closed_after is not None], 2)}
    return {
        "connections": connections, "sources": addresses, "header_seconds": header_s, "body_seconds": body_s,
        "drip_s": drip, "slack_s": slack,
        "opened": sum(o.opened for o in outcomes), "open_failed": sum(not o.opened for o in outcomes),
        "refused_at_once": dict(Counter(str(o.status) for o in refused)),
        "closed_by_server_in_time": len(in_time) - len(closed_early), "closed_early": len(closed_early),
        "closed_late": sum(o.closed_after is not None for o in held) - len(in_time),
        "still_open_after_deadline": sum(o.still_open for o in held),
        "by_kind": by_kind,
        "health_ms": _quantiles(probe.health_ms, 1), "health_failures": probe.health_failures[:5],
        "num_health_failures": len(probe.health_failures),
        "generation_s": _quantiles(probe.generation_s, 2), "generation_failures": probe.generation_failures[:5],
        "num_generation_failures": len(probe.generation_failures),
        "before_attack": {"health_ms": round(before.health_ms[0], 1), "generation_s": round(before.generation_s[0], 2)},
        "seconds": round(time.monotonic() - t0, 1),
    }


def _raise_open_files(need: int) -> None:
    """Client and in-process server each hold a descriptor per connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(hard, need)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=3000)
    p.add_argument("--sources", type=int, default=0,
                   help="loopback source addresses of the attack (0: enough to stay under max_connections_per_client)")
    p.add_argument("--drip", type=float, default=1.0, help="seconds between the bytes a slow client sends")
    p.add_argument("--slack", type=float, default=3.0, help="seconds past its deadline a close still counts as in time")
    p.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                   help="a ServerLimits field of the in-process server (e.g. max_body_seconds=10)")
    p.add_argument("--http", help="an external server's HTTP base URL (then give --header-seconds/--body-seconds)")
    p.add_argument("--header-seconds", type=float, help="the external server's max_header_seconds")
    p.add_argument("--body-seconds", type=float, help="the external server's max_body_seconds")
    p.add_argument("--json", type=Path, help="also write the counts here")
    args = p.parse_args(argv)

    _raise_open_files(2 * args.connections + 1024)
    runtime = None
    if args.http:
        from sglc_runtime.server.limits import ServerLimits

        defaults = ServerLimits()
        base = args.http.rstrip("/")
        header_s = args.header_seconds or defaults.max_header_seconds
        body_s = args.body_seconds or defaults.max_body_seconds
        per_client = defaults.max_connections_per_client
    else:
        from sglc_runtime.server.launch import Runtime, ServeConfig
        from sglc_runtime.server.limits import ServerLimits

        limits = ServerLimits().replace(**{k: int(v) for k, v in (item.split("=", 1) for item in args.limit)})
        print("soak: starting an in-process server on the default model ...", file=sys.stderr)
        runtime = Runtime(ServeConfig(port=0, http_port=0, kv_slots=8192, limits=limits))
        base = "http://" + next(f.address for f in runtime.frontends if f.kind == "http")
        header_s, body_s, per_client = limits.max_header_seconds, limits.max_body_seconds, limits.max_connections_per_client
    sources = args.sources or max(1, math.ceil(args.connections / per_client))
    try:
        print(f"soak: {args.connections} slow connections from {sources} address(es) against {base} "
              f"(deadlines: headers {header_s} s, body {body_s} s) ...", file=sys.stderr)
        summary = run_slow_body(base, connections=args.connections, header_s=header_s, body_s=body_s,
                                sources=sources, drip=args.drip, slack=args.slack)
        if runtime is not None:
            (http,) = [f for f in runtime.frontends if f.kind == "http"]
            deadline = time.monotonic() + 10
            while http.guard.num_open > 0 and time.monotonic() < deadline:  # the probes' last connections
                time.sleep(0.1)
            summary["server"] = {"open_connections_after": http.guard.num_open, "timed_out": http.guard.num_timed_out,
                                 "refused": http.guard.num_refused}
    finally:
        if runtime is not None:
            runtime.stop(1.0)
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    bad = summary["still_open_after_deadline"] or summary["closed_early"] or summary["closed_late"] \
        or summary["num_health_failures"] or summary["num_generation_failures"] or not summary["generation_s"]["n"]
    print(f"soak: {summary['opened']} opened, {summary['closed_by_server_in_time']} closed by the server in time, "
          f"{summary['refused_at_once']} refused at once, {summary['still_open_after_deadline']} still open after "
          f"the deadline, {summary['closed_early']} closed early; /health {summary['health_ms']} ms; "
          f"generation {summary['generation_s']} s (before the attack: {summary['before_attack']})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # NOTE: run as a script: make `bench` importable
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
