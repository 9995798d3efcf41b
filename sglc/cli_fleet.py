"""`sglc fleet`: N runtime workers behind SGLang's router, until SIGTERM / SIGINT.

    sglc fleet --dp N [--policy cache_aware|round_robin|random|power_of_two] [--port N] [--host H]
               [--model PATH_OR_DEFAULT] [--threads-per-worker N] [--api-key KEY] [--worker-arg ARG ...]
               [--router-arg ARG ...]

Prints ``sglc fleet: router on http://HOST:PORT ...`` on stdout once every worker is healthy and
registered with the router (port 0 picks a free port: read it from that line), then one
``sglc fleet: worker I http://... grpc HOST:PORT (pid P)`` line per worker. Needs the ``fleet`` extra
(sglang-router). Exits 0 after a clean shutdown of the router and every worker.

``--api-key KEY`` (default: $SGLC_API_KEY, as ``sglc serve``): the workers need the key, the router
sends it to them and needs it from its clients (sglc/fleet.py says which router routes stay open).
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from sglc.cli_args import port, positive_int


def add_fleet_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `fleet` subcommand to the `sglc` command's subparsers."""
    from sglc.fleet import POLICIES

    p = subparsers.add_parser(
        "fleet", help="start N runtime workers behind SGLang's router (data-parallel serving)",
        description="Start N `sglc serve` workers (each its own process and KV cache) and the real "
                    "sglang-router in front of them; one URL speaks SGLang's HTTP /generate. Stops them "
                    "all on SIGTERM/SIGINT. Needs: pip install 'sglc[fleet]'.")
    p.add_argument("--dp", type=positive_int, default=2, metavar="N", help="number of workers (default: 2)")
    p.add_argument("--policy", choices=POLICIES, default="cache_aware",
                   help="the router's policy (default cache_aware: requests sharing a prefix go to the worker "
                        "that holds it)")
    p.add_argument("--host", default="127.0.0.1", help="address of the router and workers (default: 127.0.0.1)")
    p.add_argument("--port", type=port, default=30000, help="the router's HTTP port (0 = any free port; default 30000)")
    p.add_argument("--model", default="default", metavar="PATH_OR_DEFAULT", help="the workers' model (as sglc serve)")
    p.add_argument("--threads-per-worker", type=positive_int, default=None, metavar="N",
                   help="CPU threads of each worker (default: the cores split evenly, at least 1)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="the workers' API key; the router sends it to them and requires it from its clients "
                        "('Authorization: Bearer KEY'; default: $SGLC_API_KEY; none = all open)")
    p.add_argument("--worker-arg", action="append", default=[], metavar="ARG",
                   help="one more `sglc serve` argument for every worker (repeatable), e.g. "
                        "--worker-arg=--kv-slots --worker-arg=8192")
    p.add_argument("--router-arg", action="append", default=[], metavar="ARG",
                   help="one more sglang-router argument (repeatable), e.g. --router-arg=--health-check-interval-secs "
                        "--router-arg=5 (python -m sglang_router.launch_router --help lists them)")
    p.add_argument("--ready-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="give up when the fleet is not ready after this long (default 300)")
    p.set_defaults(handler=cmd_fleet)
    return p


def cmd_fleet(args: argparse.Namespace) -> int:
    from sglc.fleet import Fleet, FleetConfig, FleetError, check_router_installed
    from sglc_runtime.server.auth import resolve_api_key  # NOTE: the one reading of --api-key / $SGLC_API_KEY

    check_router_installed()  # before anything starts
    try:
        config = FleetConfig(num_workers=args.dp, policy=args.policy, model=args.model, host=args.host, port=args.port,
                             threads_per_worker=args.threads_per_worker, worker_args=tuple(args.worker_arg),
                             router_args=tuple(args.router_arg), ready_timeout_s=args.ready_timeout,
                             api_key=resolve_api_key(args.api_key))
    except ValueError as err:
        raise FleetError(str(err)) from None
    signals: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: signals.append(signum))
                for s in (signal.SIGTERM, signal.SIGINT)}
    fleet = Fleet(config)
    try:
        fleet.start()
        print(f"sglc fleet: router on {fleet.url} (policy {config.policy}, {config.num_workers} workers, "
              f"{config.threads()} thread(s) each{', API key required' if config.api_key else ''}; "
              f"pid {fleet.router.pid})", flush=True)
        for w in fleet.workers:
            print(f"sglc fleet: worker {w.index} {w.url} grpc {w.grpc} (pid {w.proc.pid})", flush=True)
        while not signals:
            if fleet.router is not None and fleet.router.poll() is not None:
                print(f"sglc fleet: the router exited ({fleet.router.returncode}); stopping the workers",
                      file=sys.stderr, flush=True)
                return 1
            time.sleep(0.2)
        print(f"sglc fleet: {signal.Signals(signals[0]).name}: stopping the router and "
              f"{config.num_workers} workers", file=sys.stderr, flush=True)
        return 0
    finally:
        fleet.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        print("sglc fleet: stopped", file=sys.stderr, flush=True)
