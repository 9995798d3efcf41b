"""Flood a runtime server with distinct constraints (regex, json_schema, stop_regex; some over the
compile budget) over HTTP /generate and print the server's resident memory every 100 requests.

    python bench/soak_constraint_flood.py --requests 2000            # in-process server (default model)
    python bench/soak_constraint_flood.py --requests 10000 --json bench/out/constraint_flood.json
    python bench/soak_constraint_flood.py --http http://127.0.0.1:30001 --pid 1234   # an external `sglc serve`

Every pattern is new (numbered), so every request is a cache miss: the flood measures whether the
caches keyed by pattern (compiled grammars, refusals, stop_regex DFAs) stay bounded. The server's
compile workers (its child processes) are measured too: they are where refused compiles spend. Answers are
tallied by status (200 served, 400 refused for the pattern, 429 compile pool busy); a 5xx or a
connection error is a failure. Exit status 1 when one was seen, or when --max-growth is given and
RSS after warm-up grew by more than that fraction.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

#: Every OVER_BUDGET_EVERY-th request carries a pattern over the default compile budget.
OVER_BUDGET_EVERY = 4
#: One over-budget pattern in SLOW_EVERY is the slow kind (seconds of DFA construction).
SLOW_EVERY = 10
KINDS = ("regex", "json_schema", "stop_regex")


def constraint(i: int, kinds: tuple[str, ...] = KINDS, over_every: int = OVER_BUDGET_EVERY) -> tuple[str, Any, bool]:
    """(field, value, over budget) of the i-th distinct constraint: cheap ones, and every
    ``over_every``-th one over the default budget: mostly ``a{60000}`` (max_nfa_states, refused
    at parse), one in SLOW_EVERY ``(a|b)*a(a|b){25}`` (2^26 DFA states: a compile of seconds
    until max_dfa_states stops it)."""
    kind = kinds[i % len(kinds)]
    over = over_every > 0 and i % over_every == over_every - 1
    tag = f"q{i}"
    bad = f"{tag}(a|b)*a(a|b){{25}}" if (i // max(over_every, 1)) % SLOW_EVERY == 0 else f"{tag}a{{60000}}"
    if kind == "regex":
        return kind, (bad if over else f"{tag}[a-c]{{1,3}}"), over
    if kind == "json_schema":
        pattern = bad if over else f"{tag}[a-z]{{1,4}}"
        schema = {"type": "object", "properties": {tag: {"type": "string", "pattern": pattern}}, "required": [tag]}
        return kind, json.dumps(schema), over
    return kind, ([bad] if over else [f"{tag}[0-9]+"]), over


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def children(pid: int | str) -> list[int]:
    """Child processes of ``pid`` (its compile workers)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def workers_rss_bytes(pid: int | str) -> int:
    """Summed RSS of ``pid``'s child processes (a child that just exited counts 0)."""
    total = 0
    for child in children(pid):
        try:
            total += rss_bytes(child)
        except (OSError, RuntimeError):
            pass
    return total


def post(base: str, i: int, max_new_tokens: int, timeout: float, **pick: Any) -> int:
    """Status of one /generate with the i-th constraint (599 for a connection failure)."""
    field, value, _ = constraint(i, **pick)
    body = {"text": "Say something:", "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0,
                                                          field: value}}
    req = urllib.request.Request(base + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as err:
        err.read()
        return err.code
    except OSError:
        return 599


def flood(base: str, *, requests: int, workers: int, max_new_tokens: int, pid: int | str,
          timeout: float = 120.0, every: int = 100, start: int = 0, quiet: bool = False,
          **pick: Any) -> dict[str, Any]:
    """Send ``requests`` distinct constraints from ``workers`` threads; the tally and the RSS curve
    (one point per ``every`` requests answered); ``pick``: :func:`constraint`'s kinds / over_every."""
    statuses: Counter[str] = Counter()
    curve: list[dict[str, Any]] = []
    lock = threading.Lock()
    counter = iter(range(start, start + requests))
    t0 = time.monotonic()

    def worker() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            status = post(base, i, max_new_tokens, timeout, **pick)
            with lock:
                statuses[str(status)] += 1
                done = sum(statuses.values())
                if done % every == 0:
                    point = {"requests": done, "rss_mb": round(rss_bytes(pid) / 2**20, 1),
                             "workers_rss_mb": round(workers_rss_bytes(pid) / 2**20, 1),
                             "seconds": round(time.monotonic() - t0, 1)}
                    curve.append(point)
                    if not quiet:
                        print(f"flood: {done:6d} requests  rss {point['rss_mb']:8.1f} MiB  compile workers "
                              f"{point['workers_rss_mb']:7.1f} MiB  {point['seconds']:7.1f} s  {dict(statuses)}",
                              file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"requests": requests, "statuses": dict(statuses), "curve": curve,
            "seconds": round(time.monotonic() - t0, 1)}


def growth_after_warmup(curve: list[dict[str, Any]], warmup_fraction: float = 0.2) -> float:
    """(max - min) / min of RSS over the points after the first ``warmup_fraction`` of the curve."""
    tail = [p["rss_mb"] for p in curve[int(len(curve) * warmup_fraction):]] or [p["rss_mb"] for p in curve]
    return (max(tail) - min(tail)) / min(tail) if tail else 0.0


def _engine(cache_mib: int | None):
    """The in-process server's engine: the default one, or one with the grammar cache bound given."""
    if cache_mib is None:
        return None
    from sglc_runtime.constrained import ConstraintCompilerConfig
    from sglc_runtime.engine import Engine
    from sglc_runtime.engine.engine_config import EngineConfig

    compiler = ConstraintCompilerConfig(cache_bytes=cache_mib * 2**20)
    return Engine(EngineConfig(num_kv_slots=4096, constraint_compiler=compiler))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1000, help="distinct constraints to send")
    p.add_argument("--workers", type=int, default=4, help="client threads")
    p.add_argument("--max-new-tokens", type=int, default=2)
    p.add_argument("--kinds", default=",".join(KINDS), help="constraint kinds to send, comma-separated")
    p.add_argument("--over-budget-every", type=int, default=OVER_BUDGET_EVERY,
                   help="every N-th pattern is over the compile budget (0: none)")
    p.add_argument("--cache-mib", type=int, help="the in-process server's grammar cache bound (default: its own)")
    p.add_argument("--http", help="an external server's HTTP base URL (give its --pid for RSS)")
    p.add_argument("--pid", type=int, help="the external server's process id")
    p.add_argument("--max-growth", type=float, help="fail when RSS after warm-up grows by more (e.g. 0.05)")
    p.add_argument("--json", type=Path, help="also write the tally and the RSS curve here")
    args = p.parse_args(argv)

    runtime = None
    if args.http:
        if args.pid is None:
            p.error("--http needs --pid (the server process whose RSS is measured)")
        base, pid = args.http.rstrip("/"), args.pid
    else:
        from sglc_runtime.server.launch import Runtime, ServeConfig

        print("flood: starting an in-process server on the default model ...", file=sys.stderr)
        runtime = Runtime(ServeConfig(port=0, http_port=0, kv_slots=4096), engine=_engine(args.cache_mib))
        base, pid = "http://" + next(f.address for f in runtime.frontends if f.kind == "http"), "self"
    try:
        summary = flood(base, requests=args.requests, workers=args.workers, max_new_tokens=args.max_new_tokens,
                        pid=pid, kinds=tuple(args.kinds.split(",")), over_every=args.over_budget_every)
        if runtime is not None:
            grammars = runtime.engine.grammars
            summary["grammar_cache"] = {"entries": len(grammars), "bytes": grammars.nbytes,
                                        "bound_bytes": grammars.config.cache_bytes}
    finally:
        if runtime is not None:
            runtime.stop(1.0)
    summary["growth_after_warmup"] = round(growth_after_warmup(summary["curve"]), 4)
    print(json.dumps({k: v for k, v in summary.items() if k != "curve"}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    failed = sum(n for s, n in summary["statuses"].items() if int(s) >= 500)
    too_much = args.max_growth is not None and summary["growth_after_warmup"] > args.max_growth
    return 1 if failed or too_much else 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # NOTE: run as a script: make `bench` importable
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
