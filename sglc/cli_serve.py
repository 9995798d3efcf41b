"""`sglc serve`: start the runtime (gRPC) on one model until SIGTERM / SIGINT.

    sglc serve --model PATH_OR_NAME --port N [--engine torch|native] [--host 127.0.0.1] [--dtype float32|bfloat16]
               [--quantization auto|none|int8|int4]
               [--threads N]
               [--kv-slots N] [--chunked-prefill-size auto|N] [--schedule-policy lpm|fcfs|random]
               [--disable-radix-cache] [--no-precompute] [--device auto|cpu|cuda] [--attention-backend auto|torch|triton|flashinfer]
               [--constraint-budget LIMIT=N,...] [--constraint-workers N] [--api-key KEY] [--limit NAME=VALUE ...]
               [--allowed-hosts NAME[:PORT],...] [--expose-paths]

Prints ``sglc serve: listening on HOST:PORT (grpc)`` on stdout when ready (port 0 picks a free
port: read it from that line). Exits 0 after a clean shutdown.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from sglc.cli_args import compile_budget, non_negative_int, port, positive_int
from sglc.errors import SglcError


class ServeError(SglcError):
    """`sglc serve` could not start (bad model path or setting)."""


def chunk_size_arg(text: str) -> int | str:
    """--chunked-prefill-size: 'auto' or an int >= 0 (0: off)."""
    return "auto" if text.strip().lower() == "auto" else non_negative_int(text)


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `serve` subcommand to the `sglc` command's subparsers."""
    p = subparsers.add_parser(
        "serve", help="start the runtime server (gRPC) on a model",
        description="Start the sglc runtime on one model and serve it over gRPC until SIGTERM/SIGINT. "
                    "Prints 'sglc serve: listening on HOST:PORT (grpc)' when ready.")
    p.add_argument("--model", default="default", metavar="PATH_OR_NAME",
                   help="'default' (SmolLM2-135M-Instruct), a Hugging Face folder, a .gguf file, or a Hugging Face "
                        "Hub name already in the local cache: org/name, org/name:FILE.gguf, org/name:QUANT "
                        "(never downloaded; see `sglc models`)")
    p.add_argument("--engine", choices=("torch", "native"), default="torch",
                   help="torch (default): every feature, any model and device. native: a GGUF file on this CPU in "
                        "a process that never imports torch (about 1 s and 100-200 MiB less to start); it refuses "
                        "what it does not run yet by name (regex / JSON constraints, stop_regex; "
                        "docs/runtime_engine.md)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=port, default=30000, help="gRPC port (0 = any free port; default: 30000)")
    p.add_argument("--http-port", type=port, default=None, metavar="N",
                   help="also serve OpenAI-compatible and SGLang HTTP endpoints on port N (0 = any free port)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                   help="weights and KV cache dtype (default: bfloat16 when quantized, and for a folder stored in "
                        "bfloat16 on a CPU with native bf16 (AVX512-BF16/AMX); else float32)")
    p.add_argument("--quantization", choices=("auto", "none", "int8", "int4"), default="auto",
                   help="decoder weights as packed integers, computing in bfloat16 (CPU): int4 keeps a Q4_1 "
                        "GGUF's levels (groups of 32), int8 one scale per channel. Default auto: int4 for the "
                        "default model (it ships as Q4_1) on a CPU unless --dtype float32, else none")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="CPU threads computing each step (default: OMP_NUM_THREADS when set, else the physical cores "
                        "this process may use)")
    p.add_argument("--kv-slots", type=positive_int, metavar="N", help="KV cache size in tokens (default: 512 MiB worth)")
    p.add_argument("--chunked-prefill-size", type=chunk_size_arg, default="auto", metavar="auto|N",
                   help="prefill tokens per step: longer prompts are prefilled in chunks, and other requests run "
                        "between the chunks. auto (default): chunks sized from the measured prefill rate so a "
                        "step's prefill takes about 150 ms (see docs/runtime_engine.md); N: fixed chunks of N; "
                        "0 = off: a prompt's whole prefill is then one step that nothing can interrupt")
    p.add_argument("--schedule-policy", choices=("lpm", "fcfs", "random"), default="lpm",
                   help="waiting-queue order (lpm: longest cached prefix first)")
    p.add_argument("--disable-radix-cache", action="store_true", help="no prefix reuse between requests")
    p.add_argument("--no-precompute", action="store_true",
                   help="do not prefill a program's next prompt when a call whose program hint carries the text "
                        "that follows it ends (docs/program_hints.md; for comparisons)")
    p.add_argument("--max-running-requests", type=positive_int, default=64, metavar="N",
                   help="requests decoding at once (default: 64)")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]",
                   help="where the model runs (default auto: a CUDA GPU when present, else the CPU)")
    p.add_argument("--attention-backend", choices=("auto", "torch", "triton", "flashinfer"), default="auto",
                   help="attention kernels (default auto: triton on a GPU, torch on the CPU)")
    p.add_argument("--constraint-budget", type=compile_budget, default=None, metavar="LIMIT=N,...",
                   help="what compiling one request constraint may cost, e.g. 'max_dfa_states=20000,"
                        "max_compile_seconds=10' (see docs/constrained_decoding.md for the limits and defaults)")
    p.add_argument("--constraint-workers", type=non_negative_int, default=1, metavar="N",
                   help="processes compiling request constraints (default: 1; 0 compiles in the server's own "
                        "threads: no hard timeout or memory cap)")
    p.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, time given to requests in flight (default: 10)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (HTTP) / 'authorization' metadata (gRPC) on every "
                        "call but health (default: $SGLC_API_KEY; none = open)")
    p.add_argument("--allowed-hosts", type=_host_list, default=(), metavar="NAME[:PORT],...",
                   help="HTTP: Host names the server answers besides the loopback names and the --host address "
                        "(DNS-rebinding protection; a Host not allowed gets 400, an Origin not allowed 403). "
                        "'*' allows any Host: UNSAFE, any web page can then drive a loopback server")
    p.add_argument("--expose-paths", action="store_true",
                   help="/get_model_info, /get_server_info and gRPC ModelInfo show the model's absolute path (default: its name)")
    p.add_argument("--limit", action="append", default=[], type=_limit, metavar="NAME=VALUE",
                   help="change one request-size or HTTP connection limit (repeatable), e.g. --limit max_choices=512, "
                        "--limit max_header_seconds=5; names and defaults: docs/runtime_server.md")
    p.set_defaults(handler=cmd_serve)
    return p


def _host_list(text: str) -> tuple[str, ...]:
    """--allowed-hosts: comma-separated names, name:port or * (checked by HostAllowList in cmd_serve)."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _limit(text: str) -> tuple[str, int]:
    """NAME=VALUE of a ServerLimits field (checked against the names when the config is built)."""
    name, sep, value = text.partition("=")
    if not sep or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=INTEGER (e.g. max_choices=512), got {text!r}")
    return name.strip(), int(value)


def cmd_serve(args: argparse.Namespace) -> int:
    # NOTE: before numpy loads: the engine computes on its own threads (torch's, or the binding's
    # OpenMP pool); numpy's OpenBLAS pool would only spin beside them (~0.1 s of a core at each start)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.engine == "native":  # NOTE: torch's libraries load while the rest imports (~0.15 s of a ~1 s start)
        from sglc_runtime.model.native import torch_libraries

        torch_libraries.preload()
    import logging

    from sglc_runtime.constrained.compiler_config import ConstraintCompilerConfig
    from sglc_runtime.server.auth import resolve_api_key
    from sglc_runtime.server.host_allowlist import HostAllowList
    from sglc_runtime.server.launch import ServeConfig, serve
    from sglc_runtime.server.limits import ServerLimits

    try:
        limits = ServerLimits().replace(**dict(args.limit))
    except ValueError as err:
        raise ServeError(f"--limit: {err}") from None
    try:  # NOTE: before the model loads: a typo fails at once
        HostAllowList(args.host, args.allowed_hosts)
    except ValueError as err:
        raise ServeError(str(err)) from None

    logging.basicConfig(level=logging.WARNING, format="sglc serve: %(levelname)s %(name)s: %(message)s")
    config = ServeConfig(
        model=args.model, engine=args.engine, host=args.host, port=args.port, http_port=args.http_port, dtype=args.dtype,
        quantization=args.quantization, threads=args.threads,
        kv_slots=args.kv_slots,
        schedule_policy=args.schedule_policy,
        disable_radix_cache=args.disable_radix_cache, precompute=not args.no_precompute,
        max_running_requests=args.max_running_requests, device=args.device, attention_backend=args.attention_backend, grace_s=max(0.0, args.grace),
        constraint_compiler=ConstraintCompilerConfig(
            **({"budget": args.constraint_budget} if args.constraint_budget else {}),
            num_workers=args.constraint_workers),
        limits=limits, api_key=resolve_api_key(args.api_key),
        allowed_hosts=args.allowed_hosts, expose_paths=args.expose_paths,
        chunked_prefill_size=args.chunked_prefill_size or None,
    )
    try:
        return serve(config)
    except (FileNotFoundError, ValueError, TypeError) as err:  # bad --model / engine settings
        text = str(err).strip()
        raise ServeError(text.splitlines()[0] if text else type(err).__name__) from err
