"""The evaluation report (issue #7): every workload on every applicable system, one command.

    python -m bench.report [--size quick|full|tiny] [--workloads a,b] [--systems x,y]
                           [--threads 1] [--seed 0] [--dtype float32] [--out-dir bench]
    python -m bench.report --from-json bench/results.json [--out-dir bench]

Runs each workload (bench.suite.workloads.WORKLOADS, built for --size with --seed) on each
system (bench.suite.systems.SYSTEMS) that applies to it, printing progress and a summary
table, then writes OUT/results.json (raw numbers + how it was run), OUT/RESULTS.md and
OUT/plots/*.png. ``--from-json`` re-renders the markdown and plots from a saved json without
running anything. A measurement that crashes is recorded as failed and the report goes on.
Timings are never asserted; see docs/benchmarks.md for what each number means.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/report.py`: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.suite.markdown import render  # noqa: E402
from bench.suite.plots import write_plots  # noqa: E402
from bench.suite.systems import SYSTEMS, get_system  # noqa: E402

SCHEMA = "sglc-bench-report/1"
SIZES = ("tiny", "quick", "full")


def _workload_registry() -> dict[str, Any]:
    try:
        from bench.suite.workloads import WORKLOADS
    except ImportError as err:
        raise SystemExit(f"bench.report: the workload registry bench.suite.workloads.WORKLOADS is missing: {err}")
    return WORKLOADS


def _pick(names: str | None, known: list[str], what: str) -> list[str]:
    if not names:
        return list(known)
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise SystemExit(f"bench.report: unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return [n for n in known if n in chosen]  # NOTE: report order, whatever the command-line order


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


#: Every core: the report is meant to run alone (torch threads spinning against other jobs make
#: steps several times slower, so never compare timings taken under load).
DEFAULT_THREADS = max(1, min(os.cpu_count() or 1, 16))

#: Programs the HF baseline times per workload (the head of the inputs, one at a time; see runner.py).
HF_PROGRAMS = {"tiny": 2, "quick": 3, "full": 8}


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    return {
        "command": " ".join(["python -m bench.report", *sys.argv[1:]]),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "size": args.size, "seed": args.seed, "threads": args.threads, "dtype": args.dtype,
        "hf_programs": args.hf_programs or HF_PROGRAMS[args.size],
        "model": "SmolLM2-135M-Instruct (default)",
        "machine": platform.platform(), "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "memory_gib": _memory_gib(),
        "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
        "git_commit": _git_commit(),
    }


def _workload_header(workload: Any) -> dict[str, Any]:
    return {"name": workload.name, "title": workload.title, "shape": workload.shape,
            "prefix_heavy": workload.prefix_heavy, "has_forks": workload.has_forks,
            "has_constraints": workload.has_constraints, "results": {}}


def _progress(workload: str, system: str, entry: dict[str, Any]) -> str:
    if entry["status"] == "n/a":
        return f"  {workload:22s} {system:22s} n/a ({entry['reason']})"
    if entry["status"] == "failed":
        return f"  {workload:22s} {system:22s} FAILED: {entry['error']}"
    lat = entry["latency_s"]
    opt = entry["optimal_hit_rate"]
    return (f"  {workload:22s} {system:22s} {entry['programs_per_s']:8.3f} prog/s  wall {entry['wall_s']:7.2f} s  "
            f"latency {'—' if lat is None else f'{lat:.2f} s':>8s}  hit {100 * entry['hit_rate']:5.1f}%"
            f" / opt {'—' if opt is None else f'{100 * opt:.1f}%'}"
            + f"  ({entry['measure_s']:.0f} s in all)"
            + (f"  ERRORS {entry['num_errors']}: {entry['errors'][0]}" if entry["num_errors"] else ""))


def run_report(args: argparse.Namespace, checkpoint: Path | None = None) -> dict[str, Any]:
    """Measure every selected workload on every selected, applicable system; the report dict.

    With `checkpoint`, the report so far (``meta.partial: true``) is written there after every
    measurement, so an interrupted run keeps what it measured.
    """
    import torch

    from bench.suite.runner import SystemContext, measure

    registry = _workload_registry()
    workloads = _pick(args.workloads, list(registry), "workload(s)")
    systems = _pick(args.systems, list(SYSTEMS), "system(s)")
    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"schema": SCHEMA, "meta": _meta(args),
                              "systems": [{"name": n, "title": SYSTEMS[n].title,
                                           "description": SYSTEMS[n].description} for n in systems],
                              "workloads": []}
    context = SystemContext(dtype=args.dtype, hf_max_programs=args.hf_programs or HF_PROGRAMS[args.size])
    start = time.perf_counter()
    try:
        for wi, name in enumerate(workloads, 1):
            workload = registry[name]
            entry = _workload_header(workload)
            report["workloads"].append(entry)
            t0 = time.perf_counter()
            instance = workload.build(args.size, args.seed)
            entry["build_s"] = round(time.perf_counter() - t0, 3)
            entry["programs"] = len(instance.inputs)
            entry["latency_inputs"] = len(instance.latency_inputs)
            print(f"[{wi}/{len(workloads)}] {workload.title}: {len(instance.inputs)} programs, "
                  f"{len(instance.latency_inputs)} latency input(s)", flush=True)
            for system_name in systems:
                system = get_system(system_name)
                applies, reason = system.applies_to(workload)
                if not applies:
                    result: dict[str, Any] = {"status": "n/a", "reason": reason}
                else:
                    t0 = time.perf_counter()
                    try:
                        result = {"status": "ok", **measure(instance, system, context, workload=name).to_json()}
                    except Exception as err:  # NOTE: one crash must not lose the whole report
                        traceback.print_exc()
                        result = {"status": "failed", "error": f"{type(err).__name__}: {err}"}
                    result["measure_s"] = round(time.perf_counter() - t0, 2)  # setup + warm-up + batch + latency
                entry["results"][system_name] = result
                print(_progress(name, system_name, result), flush=True)
                if checkpoint is not None:
                    report["meta"].update(partial=True, total_wall_s=round(time.perf_counter() - start, 1))
                    _write_json(report, checkpoint)
    finally:
        context.close()
        report["meta"].pop("partial", None)
        report["meta"]["total_wall_s"] = round(time.perf_counter() - start, 1)
    return report


def _write_json(report: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(path)  # NOTE: atomic, so a reader never sees half a report
    return path


def write_outputs(report: dict[str, Any], out_dir: Path, json_path: Path | None = None) -> dict[str, Path]:
    """RESULTS.md and plots/ under out_dir (and the json itself unless json_path is given)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if json_path is None:
        json_path = _write_json(report, out_dir / "results.json")
    try:
        shown = json_path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = json_path
    markdown = out_dir / "RESULTS.md"
    markdown.write_text(render(report, str(shown)))
    plots = write_plots(report, out_dir / "plots")
    return {"json": json_path, "markdown": markdown, **{p.stem: p for p in plots}}


def summary_table(report: dict[str, Any]) -> str:
    """A compact console table: programs/s per workload x system (n/a, failed shown as such)."""
    names = [s["name"] for s in report["systems"]]
    width = max([8] + [len(n) for n in names])
    lines = [f"{'workload':22s} " + " ".join(f"{n:>{width}s}" for n in names)]
    for w in report["workloads"]:
        cells = []
        for n in names:
            r = w["results"].get(n, {"status": "not run"})
            cells.append(f"{r['programs_per_s']:{width}.3f}" if r["status"] == "ok" else f"{r['status']:>{width}s}")
        lines.append(f"{w['name']:22s} " + " ".join(cells))
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="quick", help="workload sizes (default: quick)")
    parser.add_argument("--workloads", help="comma-separated workload names (default: all)")
    parser.add_argument("--systems", help=f"comma-separated systems (default: all: {','.join(SYSTEMS)})")
    parser.add_argument("--hf-programs", type=int, default=None,
                        help="programs HF per call times, one at a time (default by size: "
                             + ", ".join(f"{k} {v}" for k, v in HF_PROGRAMS.items()) + ")")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"torch intra-op threads (default: the CPU count, here {DEFAULT_THREADS}); "
                             "take timings on an otherwise idle machine")
    parser.add_argument("--seed", type=int, default=0, help="data generation seed (default 0)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--out-dir", type=Path, default=Path("bench"),
                        help="writes OUT/results.json, OUT/RESULTS.md, OUT/plots/ (default: bench)")
    parser.add_argument("--from-json", type=Path, help="re-render markdown and plots from this json; runs nothing")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.from_json is not None:
        try:
            report = json.loads(args.from_json.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SystemExit(f"bench.report: cannot read {args.from_json}: {err}")
        if report.get("schema") != SCHEMA:
            raise SystemExit(f"bench.report: {args.from_json} is not a {SCHEMA} json (schema {report.get('schema')!r})")
        written = write_outputs(report, args.out_dir, json_path=args.from_json)
    else:
        report = run_report(args, checkpoint=args.out_dir / "results.json")
        print()
        print(summary_table(report))
        written = write_outputs(report, args.out_dir)
        print(f"\ntotal wall time {report['meta']['total_wall_s']:.1f} s")
    for path in written.values():
        print(f"wrote {path}")
    failed = [f"{w['name']}/{n}" for w in report["workloads"] for n, r in w["results"].items()
              if r["status"] == "failed" or r.get("num_errors")]
    if failed:
        print(f"measurements with failures: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0  # NOTE: the files are written either way


if __name__ == "__main__":
    sys.exit(main())
