"""`sglc run`: execute a graph.pb once per input line, write one JSON result per line.

    sglc run GRAPH.pb --backend srt [--endpoint host:port] --input args.jsonl --output out.jsonl
    sglc run GRAPH.pb --backend sglang --endpoint http://host:port ...   (router, sglc serve --http-port, SGLang)
                      [--concurrency N] [--max-parallel N] [--timeout S]
                      [--temperature T] [--max-new-tokens N] [--seed S] [--program-hints on|off]

Without ``--endpoint`` the embedded runtime (an in-process engine on the default model, or
``--model``) runs the graph, so nothing else needs to be started.

Exit status: 0 when every input succeeded; 1 when some input failed (each is reported on
stderr as ``sglc: input 3 failed: <reason>`` and its JSONL line carries ``"error"``; the other
results are kept); 2 for usage and format errors (bad graph.pb, an input line that is not a
JSON object), before anything runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from pathlib import Path
from typing import IO, Any, Iterator, Optional

from sglc.cli_args import non_negative_int, positive_int, temperature
from sglc.errors import SglcError, one_line_error

EXIT_OK, EXIT_FAILED_INPUTS = 0, 1


class RunUsageError(SglcError):
    """A problem with `sglc run`'s inputs (exit status 2)."""


def add_run_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `sglc run` on the CLI's subparsers."""
    from sglc.executor.defaults import DEFAULT_CONCURRENCY, DEFAULT_MAX_PARALLEL

    run = subparsers.add_parser(
        "run", help="execute a graph.pb for each input line (JSONL in, JSONL out)",
        description="Execute a compiled graph once per input line (a JSON object of the program's "
                    "arguments) and write one JSON result per line, in input order. Without --endpoint "
                    "the embedded runtime (in-process engine, default model) is started.")
    run.add_argument("graph", metavar="GRAPH.pb")
    run.add_argument("--backend", default="srt", choices=["srt", "openai", "sglang"],
                     help="backend kind (default: srt; sglang: SGLang's HTTP /generate at --endpoint http://host:port, "
                          "e.g. an `sglc fleet` router or an SGLang server)")
    run.add_argument("--endpoint", metavar="HOST:PORT", help="a `sglc serve` runtime; omit for the embedded one")
    run.add_argument("--input", "-i", metavar="ARGS.jsonl", required=True,
                     help="one JSON object of program arguments per line ('-' for stdin)")
    run.add_argument("--output", "-o", metavar="OUT.jsonl", default="-", help="results file (default: stdout)")
    run.add_argument("--concurrency", type=positive_int, default=DEFAULT_CONCURRENCY,
                     help=f"inputs in flight at once (default {DEFAULT_CONCURRENCY})")
    run.add_argument("--max-parallel", type=positive_int, default=DEFAULT_MAX_PARALLEL,
                     help=f"model calls in flight per program, e.g. fork branches (default {DEFAULT_MAX_PARALLEL}; "
                          "1 = no intra-program parallelism)")
    run.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                     help="fail an input that has not finished after this many seconds")
    run.add_argument("--model", default="default",
                     help="model of the embedded runtime (default: SmolLM2-135M); with --backend openai, the "
                          "endpoint's model name (default: the first /v1/models lists; key from OPENAI_API_KEY)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.add_argument("--api-key", default=None, metavar="KEY",
                     help="the server's API key (srt: default $SGLC_API_KEY; openai: default $OPENAI_API_KEY)")
    # NOTE: run-level sampling, like SGLang's run(temperature=..., max_new_tokens=...): a gen's own
    # parameters still win; --temperature 0 makes every unpinned gen greedy.
    run.add_argument("--temperature", type=temperature, default=None, metavar="T",
                     help="default temperature of every gen that sets none (0 = greedy; default 1.0, SGLang's)")
    run.add_argument("--max-new-tokens", type=positive_int, default=None, metavar="N",
                     help="default max tokens of every gen that sets none (default 128, SGLang's)")
    run.add_argument("--seed", type=non_negative_int, default=None, metavar="S",
                     help="sampling seed of every gen that sets none (repeatable sampled runs)")
    run.add_argument("--program-hints", choices=["on", "off"], default="on",
                     help="tell the runtime each call's place in its program run (which cached prefixes a later "
                          "call extends, and when the run ends) so it keeps the right ones (default: on; advice only, "
                          "results do not change; backends that take no hints ignore them)")
    run.set_defaults(handler=cmd_run)
    return run


def read_inputs(path: str) -> list[dict[str, Any]]:
    """The input objects, one per non-empty line; RunUsageError naming the line otherwise."""
    name = "<stdin>" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise RunUsageError(f"{name}: {err.strerror or err}") from None
    inputs: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise RunUsageError(f"{name}:{number}: not valid JSON: {err.msg}") from None
        if not isinstance(value, dict):
            raise RunUsageError(f"{name}:{number}: each line must be a JSON object of program arguments, "
                                f"got {type(value).__name__}")
        inputs.append(value)
    return inputs


@contextlib.contextmanager
def _open_output(path: str) -> Iterator[IO[str]]:
    if path == "-":
        yield sys.stdout
        return
    try:
        handle = open(path, "w", encoding="utf-8")
    except OSError as err:
        raise RunUsageError(f"{path}: {err.strerror or err}") from None
    with handle:
        yield handle


def _make_backend(args: argparse.Namespace) -> Any:
    from sglc.backends import make_backend

    if args.backend == "srt" and args.endpoint is None:
        print(f"sglc run: no --endpoint: starting the embedded runtime (loading model {args.model!r}; "
              "this takes a few seconds)", file=sys.stderr)
        return make_backend("srt", None, model=args.model)
    key = {"api_key": args.api_key} if args.api_key else {}
    if args.backend == "openai":  # --model names the endpoint's model ("default": the first it lists)
        return make_backend("openai", args.endpoint, model=args.model, **key)
    return make_backend(args.backend, args.endpoint, **key)


def run_sampling(args: argparse.Namespace) -> dict[str, Any]:
    """The run-level sampling defaults the flags set (SGLang's run() keyword names)."""
    from sglc.executor.semantics import sampling_defaults

    return sampling_defaults({"temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
                              "seed": args.seed})


def cmd_run(args: argparse.Namespace) -> int:
    from sglc.executor.batch import run_graph_batch
    from sglc.executor.errors import describe
    from sglc.executor.results import OrderedJsonlWriter, ProgramResult
    from sglc.ir.serialize import load

    graph = load(args.graph)
    inputs = read_inputs(args.input)
    failed: list[int] = []
    report_lock = threading.Lock()

    def report(result: ProgramResult) -> None:  # called from the batch's worker threads
        if result.error is not None:
            # NOTE: one write under a lock: print() writes the text and the newline separately,
            # so lines from two failing inputs could interleave.
            with report_lock:
                failed.append(result.index)
                sys.stderr.write(f"sglc: input {result.index} failed: {one_line_error(result.error, 1500)}\n")
                sys.stderr.flush()

    with _open_output(args.output) as out:
        writer = OrderedJsonlWriter(out)
        backend: Optional[Any] = None
        try:
            # NOTE: graph.meta["num_api_spec_tokens"] reaches the backend per run (GraphExecutor)
            backend = _make_backend(args)
        except (SglcError, OSError, ValueError, RuntimeError) as err:
            reason = f"backend unavailable: {describe(err)}"
            for i, arguments in enumerate(inputs):
                result = ProgramResult(index=i, arguments=arguments, error=reason)
                writer.add(result)
                report(result)
        if backend is not None:
            try:
                run_graph_batch(graph, backend, inputs, concurrency=args.concurrency, max_parallel=args.max_parallel,
                                sampling=run_sampling(args), timeout=args.timeout, writer=writer,
                                progress=not args.no_progress, on_result=report,
                                program_hints=args.program_hints == "on")
            finally:
                backend.close()
    where = "stdout" if args.output == "-" else args.output
    print(f"sglc run: {len(inputs)} input(s), {len(inputs) - len(failed)} ok, {len(failed)} failed -> {where}",
          file=sys.stderr)
    return EXIT_FAILED_INPUTS if failed else EXIT_OK
