"""Soak / fuzz a runtime server for N minutes with the generators of bench/server_fuzz.py and print
the counts: requests, answers by status, 5xx / INTERNAL, hangs, tracebacks (in answers and in the
server log) and leaks (calls still active, engine requests or outputs left after the run).

    python bench/soak_server.py --minutes 10                  # starts an in-process server (default model)
    python bench/soak_server.py --minutes 10 --workers 8 --seed 3 --json bench/out/soak_server.json
    python bench/soak_server.py --http http://127.0.0.1:30001 --grpc 127.0.0.1:30000 --api-key KEY
      (an external `sglc serve`: its log is not watched and leaks are read from its metrics)

Exit status 0 when nothing bad was seen, 1 otherwise.

Other soaks run through ``--mode NAME`` (the flags after it are that soak's own, see MODES):

    python bench/soak_server.py --mode slow-body --connections 3000   # bench/soak_slow_body.py
    python bench/soak_server.py --mode constraint-flood --requests 10000  # bench/soak_constraint_flood.py
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # NOTE: run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.server_fuzz import LogWatch, run_fuzz  # noqa: E402


def _leaks_in_process(runtime) -> dict:
    engine = runtime.engine
    deadline = time.monotonic() + 60
    while (runtime.service.num_active or engine.stats().num_running or engine.stats().num_waiting) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    stats = engine.stats()
    with engine._lock:
        try:
            engine.scheduler.check_integrity()
            integrity = "ok"
        except AssertionError as err:
            integrity = f"FAILED: {err}"
    return {"active_calls": runtime.service.num_active, "engine_running": stats.num_running,
            "engine_waiting": stats.num_waiting, "kept_outputs": len(engine._results), "kv_integrity": integrity}


def _leaks_remote(grpc_address: str, api_key: str | None) -> dict:
    from sglc.executor.backends.srt import SrtBackend

    with SrtBackend(grpc_address, api_key=api_key) as backend:
        deadline = time.monotonic() + 60
        while (m := backend.metrics())["num_active"] and time.monotonic() < deadline:
            time.sleep(0.5)
        return {"active_calls": m["num_active"], "engine_running": m["num_running"], "engine_waiting": m["num_waiting"]}


#: ``--mode NAME``: the module whose ``main(argv)`` runs that soak with the remaining flags.
MODES = {
    "slow-body": "bench.soak_slow_body",
    "constraint-flood": "bench.soak_constraint_flood",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 2 and argv[0] == "--mode" and argv[1] != "fuzz":
        if argv[1] not in MODES:
            sys.exit(f"soak_server: unknown --mode {argv[1]!r}; known: fuzz, {', '.join(MODES)}")
        import importlib

        return importlib.import_module(MODES[argv[1]]).main(argv[2:])
    argv = argv[2:] if argv[:1] == ["--mode"] else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=4, help="client threads")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds after which an answer counts as a hang")
    p.add_argument("--http", help="an external server's HTTP base URL (with --grpc)")
    p.add_argument("--grpc", help="an external server's gRPC address host:port (with --http)")
    p.add_argument("--api-key", help="the external server's API key")
    p.add_argument("--json", type=Path, help="also write the counts here")
    args = p.parse_args(argv)

    runtime = None
    if args.http and args.grpc:
        base, grpc_address = args.http.rstrip("/"), args.grpc
    else:
        from sglc_runtime.server.launch import Runtime, ServeConfig

        print("soak: starting an in-process server on the default model ...", file=sys.stderr)
        runtime = Runtime(ServeConfig(port=0, http_port=0, kv_slots=8192, api_key=args.api_key))
        base = "http://" + next(f.address for f in runtime.frontends if f.kind == "http")
        grpc_address = runtime.frontends[0].address
    try:
        t0 = time.monotonic()
        with LogWatch() as watch:
            tally = run_fuzz(base, grpc_address, seconds=args.minutes * 60, seed=args.seed, workers=args.workers,
                             timeout=args.timeout, api_key=args.api_key)
            leaks = _leaks_in_process(runtime) if runtime is not None else _leaks_remote(grpc_address, args.api_key)
        summary = tally.summary()
        summary.update(seconds=round(time.monotonic() - t0, 1), seed=args.seed, logged_tracebacks=len(watch.tracebacks),
                       leaks=leaks)
        summary["examples"]["logged_tracebacks"] = watch.tracebacks[:5]
    finally:
        if runtime is not None:
            runtime.stop(1.0)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    leaked = leaks["active_calls"] or leaks["engine_running"] or leaks["engine_waiting"] or leaks.get("kept_outputs") \
        or leaks.get("kv_integrity", "ok") != "ok"
    bad = summary["server_errors"] or summary["tracebacks"] or summary["hangs"] or summary["logged_tracebacks"] or leaked
    print(f"soak: {summary['requests']} requests in {summary['seconds']} s: {summary['clean_errors']} clean errors, "
          f"{summary['server_errors']} 5xx/INTERNAL, {summary['hangs']} hangs, "
          f"{summary['tracebacks'] + summary['logged_tracebacks']} tracebacks, leaks {leaks}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
