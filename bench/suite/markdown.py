"""bench/RESULTS.md from a report json (bench/results.json): every number comes from the json.

The report json (written by bench/report.py)::

    {"schema": "sglc-bench-report/1",
     "meta": {"command", "date", "total_wall_s", "size", "seed", "threads", "dtype", "machine", ...},
     "systems": [{"name", "title", "description"}, ...],             # report order
     "workloads": [{"name", "title", "shape", "prefix_heavy", "has_forks", "has_constraints",
                    "results": {system: {"status": "ok", ...Measurement fields...}
                                       | {"status": "n/a", "reason": "..."}
                                       | {"status": "failed", "error": "..."}}}, ...]}

Targets (issue #7) are judged here, per workload, from the same numbers (:func:`evaluate_targets`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

SGLC, HF, NO_CACHE, NO_JUMP_FORWARD = "sglc", "hf-per-call", "no-cache", "no-jump-forward"

#: Target thresholds from issue #7.
PREFIX_HEAVY_SPEEDUP = 5.0
HIT_RATE_FRACTION = 0.96
JUMP_FORWARD_SPEEDUP = 1.6


# --- reading the json ------------------------------------------------------------------------------
def result(workload: dict[str, Any], system: str) -> dict[str, Any]:
    """The workload's entry for `system` ({"status": "not run"} when the system was not selected)."""
    return workload.get("results", {}).get(system) or {"status": "not run"}


def ok(workload: dict[str, Any], system: str) -> Optional[dict[str, Any]]:
    """The measurement of `system` on `workload` when it ran (failed/n-a/not run -> None)."""
    r = result(workload, system)
    return r if r.get("status") == "ok" else None


def throughput_ratio(workload: dict[str, Any], system: str, baseline: str) -> Optional[float]:
    """programs/s of `system` over that of `baseline`; None unless both ran with a positive rate."""
    a, b = ok(workload, system), ok(workload, baseline)
    if a is None or b is None or not b["programs_per_s"]:
        return None
    return a["programs_per_s"] / b["programs_per_s"]


def agreement(workload: dict[str, Any], system: str, reference: str = SGLC) -> Optional[tuple[int, int]]:
    """(programs whose output fingerprints equal the reference's, programs); None unless both ran."""
    a, b = ok(workload, system), ok(workload, reference)
    if a is None or b is None:
        return None
    pairs = list(zip(a["fingerprints"], b["fingerprints"]))
    return sum(1 for x, y in pairs if x is not None and x == y), len(pairs)


def hit_rate_fraction(workload: dict[str, Any]) -> Optional[float]:
    """sglc's achieved hit rate over the optimal one; None when not measured or the optimum is 0."""
    m = ok(workload, SGLC)
    if m is None or m.get("optimal_hit_rate") in (None, 0) or m.get("hit_rate") is None:
        return None
    return m["hit_rate"] / m["optimal_hit_rate"]


def system_names(report: dict[str, Any]) -> list[str]:
    return [s["name"] for s in report.get("systems", [])]


# --- targets ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetRow:
    workload: str
    value: Optional[float]
    met: Optional[bool]  # None: could not be judged (see note)
    note: str = ""


@dataclass(frozen=True)
class Target:
    title: str
    unit: str  # how `value` reads: "x" (a ratio) or "%" (a fraction shown as percent)
    rows: list[TargetRow]

    @property
    def judged(self) -> list[TargetRow]:
        return [r for r in self.rows if r.met is not None]

    def summary(self) -> str:
        if not self.rows:
            return "no workload in this report is covered by this target"
        judged = self.judged
        met = sum(1 for r in judged if r.met)
        text = f"met on {met} of {len(judged)} workload{'s' if len(judged) != 1 else ''}"
        if len(judged) < len(self.rows):
            text += f" ({len(self.rows) - len(judged)} not judged)"
        return text


def _row(name: str, value: Optional[float], threshold: float, missing: str) -> TargetRow:
    if value is None:
        return TargetRow(name, None, None, missing)
    return TargetRow(name, value, value >= threshold)


def evaluate_targets(report: dict[str, Any]) -> list[Target]:
    """The three issue #7 targets, judged per workload from the report's numbers."""
    speedup, hit, jump = [], [], []
    for w in report["workloads"]:
        name = w["name"]
        if w.get("prefix_heavy"):
            speedup.append(_row(name, throughput_ratio(w, SGLC, HF), PREFIX_HEAVY_SPEEDUP,
                                "sglc or hf-per-call did not run"))
        m = ok(w, SGLC)
        if m is not None and m.get("optimal_hit_rate") == 0:
            hit.append(TargetRow(name, None, None, "optimal hit rate is 0: no reuse possible"))
        elif m is not None or result(w, SGLC)["status"] == "failed":
            hit.append(_row(name, hit_rate_fraction(w), HIT_RATE_FRACTION, "sglc failed or has no hit rates"))
        if w.get("has_constraints"):
            jump.append(_row(name, throughput_ratio(w, SGLC, NO_JUMP_FORWARD), JUMP_FORWARD_SPEEDUP,
                             "sglc or no-jump-forward did not run"))
    return [
        Target(f">= {PREFIX_HEAVY_SPEEDUP:g}x the throughput of HF per call on prefix-heavy workloads "
               "(sglc / hf-per-call programs/s)", "x", speedup),
        Target(f">= {HIT_RATE_FRACTION:.0%} of the optimal cache hit rate (sglc achieved / optimal)", "%", hit),
        Target(f">= {JUMP_FORWARD_SPEEDUP:g}x constrained (JSON) decoding throughput with jump-forward "
               "(sglc / no-jump-forward programs/s)", "x", jump),
    ]


# --- formatting ------------------------------------------------------------------------------------
def fmt_rate(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.3g}"


def fmt_ratio(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.2f}x"


def fmt_pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def fmt_s(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.2f}"


def cell(workload: dict[str, Any], system: str, text_of_ok: Any, reason: bool = True) -> str:
    """A table cell: the formatted measurement, or n/a (reason) / failed / not run."""
    r = result(workload, system)
    status = r.get("status")
    if status == "ok":
        return text_of_ok(r) + (f" ({r['num_errors']} err)" if r.get("num_errors") else "")
    if status == "n/a":
        return f"n/a ({r.get('reason', '')})" if reason else "n/a"
    return str(status)


def _table(header: list[str], rows: list[list[str]], text_columns: int = 1) -> list[str]:
    """A markdown table; the first `text_columns` columns left-aligned, the rest (numbers) right-aligned."""
    rule = "|" + "|".join("---" if i < text_columns else "--:" for i in range(len(header))) + "|"
    out = ["| " + " | ".join(header) + " |", rule]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def geomean(values: list[float]) -> Optional[float]:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


# --- sections --------------------------------------------------------------------------------------
def _how_run(report: dict[str, Any]) -> list[str]:
    m = report.get("meta", {})
    total = m.get("total_wall_s")
    machine = f"{m.get('machine', '?')}; {m.get('cpu_count', '?')} CPUs"
    if m.get("processor"):
        machine += f" ({m['processor']})"
    if m.get("memory_gib"):
        machine += f"; {m['memory_gib']:.0f} GiB memory"
    software = f"Python {m.get('python', '?')}, torch {m.get('torch', '?')}, transformers {m.get('transformers', '?')}"
    if m.get("git_commit"):
        software += f"; sglc commit {m['git_commit']}"
    wall = "?" if total is None else f"{total:.1f} s ({total / 60:.1f} min)"
    note = "- **Partial report**: the run was interrupted; only the measurements below were made."
    return ["## How it was run", "", *([note] if m.get("partial") else []),
            f"- Command: `{m.get('command', '?').strip()}`",
            f"- Machine: {machine}",
            f"- Software: {software}",
            f"- Model: {m.get('model', '?')}, dtype {m.get('dtype', '?')}, torch threads {m.get('threads', '?')}",
            f"- Size: {m.get('size', '?')}, seed {m.get('seed', '?')}; date {m.get('date', '?')}; total wall time {wall}",
            "- Decoding: greedy, eos ignored (every system does the same model work). Throughput: the timed "
            "batch with every input submitted at once; latency: one program alone, cold cache, mean over the "
            "latency inputs. HF per call makes one model call at a time and keeps nothing between calls, so its "
            f"batch is its programs one after another: it times the first {m.get('hf_programs', 'all')} programs of "
            "each workload alone, which give both its throughput and its latency.", ""]


def _throughput(report: dict[str, Any]) -> list[str]:
    names = system_names(report)
    header = ["Workload", "programs"] + names + ["sglc / HF", "sglc / no-cache"]
    rows = []
    for w in report["workloads"]:
        s = ok(w, SGLC)
        rows.append([w.get("title", w["name"]), str(s["programs"]) if s else "—"]
                    + [cell(w, n, lambda r: fmt_rate(r["programs_per_s"]), reason=False) for n in names]
                    + [fmt_ratio(throughput_ratio(w, SGLC, HF)), fmt_ratio(throughput_ratio(w, SGLC, NO_CACHE))])
    return (["## Throughput (programs/s)", "",
             "The timed batch: every input submitted at once (hf-per-call: one program at a time). "
             "n/a: not run, see the ablation table for why.", ""] + _table(header, rows) + [""])


def _latency_hits(report: dict[str, Any]) -> list[str]:
    header = ["Workload", "latency sglc (s)", "latency HF (s)", "HF / sglc latency", "hit rate achieved",
              "hit rate optimal", "achieved / optimal", "outputs = HF"]
    rows = []
    for w in report["workloads"]:
        s, h = ok(w, SGLC), ok(w, HF)
        lat = (h["latency_s"] / s["latency_s"]) if s and h and s.get("latency_s") and h.get("latency_s") else None
        agree = agreement(w, HF)
        rows.append([w.get("title", w["name"]), cell(w, SGLC, lambda r: fmt_s(r["latency_s"])),
                     cell(w, HF, lambda r: fmt_s(r["latency_s"])), fmt_ratio(lat),
                     fmt_pct(s["hit_rate"]) if s else "—", fmt_pct(s.get("optimal_hit_rate")) if s else "—",
                     fmt_pct(hit_rate_fraction(w)), f"{agree[0]}/{agree[1]}" if agree else "—"])
    return (["## Latency alone, cache hit rate (sglc), outputs agreeing with HF", ""] + _table(header, rows)
            + ["", "Outputs agree when a program's output variables are identical (greedy float32 on both sides; "
                   "numerical differences may flip a token, so full agreement is expected but not guaranteed).", ""])


def _ablation(report: dict[str, Any]) -> list[str]:
    names = [n for n in system_names(report) if n not in (SGLC, HF)]
    if not names:
        return []
    rows, per_system = [], {n: [] for n in names}
    for w in report["workloads"]:
        row = [w.get("title", w["name"])]
        for n in names:
            ratio = throughput_ratio(w, n, SGLC)
            if ratio is not None:
                per_system[n].append(ratio)
                row.append(fmt_ratio(ratio))
            else:
                row.append(cell(w, n, lambda r: "—"))
        rows.append(row)
    rows.append(["**geometric mean**"] + [fmt_ratio(geomean(per_system[n])) for n in names])
    shown_hf = [HF] if HF in system_names(report) else []
    agree_rows = []
    for w in report["workloads"]:
        counts = [agreement(w, n) for n in names + shown_hf]
        agree_rows.append([w.get("title", w["name"])] + [f"{a[0]}/{a[1]}" if a else "—" for a in counts])
    return (["## Ablation: throughput relative to sglc (all on)", "",
             "Each column turns one feature off; below 1.00x means the feature helps. n/a: the feature cannot "
             "change anything on that workload (not run).", ""]
            + _table(["Workload"] + names, rows)
            + ["", "### Outputs identical to sglc (programs)", ""]
            + _table(["Workload"] + names + shown_hf, agree_rows) + [""])


def _verdict(row: TargetRow) -> str:
    if row.met is None:
        return f"n/a ({row.note})"
    return "met" if row.met else "not met"


def _model_work(report: dict[str, Any]) -> list[str]:
    names = [n for n in system_names(report) if n != HF]
    if not names:
        return []
    rows = [[w.get("title", w["name"])]
            + [cell(w, n, lambda r: f"{r['prefill_tokens_computed']} / {r['engine_steps']}", reason=False) for n in names]
            for w in report["workloads"]]
    return (["## Model work over the timed batch (prefill tokens computed / engine steps)", "",
             "Far less noisy than wall time on a shared machine: fewer prefill tokens is the cache at work, "
             "fewer steps is better batching.", ""] + _table(["Workload"] + names, rows) + [""])


def _jump_forward(report: dict[str, Any]) -> list[str]:
    rows = []
    for w in report["workloads"]:
        a, b = ok(w, SGLC), ok(w, NO_JUMP_FORWARD)
        if not w.get("has_constraints") or a is None or b is None:
            continue
        lat = b["latency_s"] / a["latency_s"] if a.get("latency_s") and b.get("latency_s") else None
        jumps = (a.get("extra") or {}).get("jump_forward") or {}
        rows.append([w.get("title", w["name"]), fmt_ratio(throughput_ratio(w, SGLC, NO_JUMP_FORWARD)), fmt_ratio(lat),
                     f"{a.get('engine_steps')} / {b.get('engine_steps')}",
                     f"{jumps.get('jumps', '—')} / {jumps.get('tokens', '—')}"])
    if not rows:
        return []
    return (["## Jump-forward on constrained workloads", "",
             "sglc vs no-jump-forward: the timed batch, one program alone, engine steps of the batch, and the "
             "jumps sglc made (jumps / tokens they added). A jumped token still goes through the model once "
             "(as part of an extend), so jump-forward saves steps, not token rows.", ""]
            + _table(["Workload", "batch programs/s", "latency alone", "steps sglc / no-jump-forward",
                      "jumps / tokens"], rows) + [""])


def _targets(report: dict[str, Any]) -> list[str]:
    out = ["## Targets (issue #7)", ""]
    for t in evaluate_targets(report):
        out += [f"### {t.title}", "", f"**{t.summary()}**", ""]
        if not t.rows:
            continue
        fmt = fmt_pct if t.unit == "%" else fmt_ratio
        out += _table(["Workload", "value", "target"], [[r.workload, fmt(r.value), _verdict(r)] for r in t.rows]) + [""]
    return out


def _errors(report: dict[str, Any]) -> list[str]:
    lines = []
    for w in report["workloads"]:
        for name, r in w.get("results", {}).items():
            if r.get("status") == "failed":
                lines.append(f"- {w['name']} / {name}: failed: {r.get('error')}")
            elif r.get("num_errors"):
                lines.append(f"- {w['name']} / {name}: {r['num_errors']} program(s) failed, e.g. {r['errors'][0]}")
    return (["## Errors", ""] + lines + [""]) if lines else []


def _workloads(report: dict[str, Any]) -> list[str]:
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    rows = [[w.get("title", w["name"]), f"`{w['name']}`", w.get("shape", ""), yes(w.get("prefix_heavy")),
             yes(w.get("has_forks")), yes(w.get("has_constraints"))] for w in report["workloads"]]
    systems = [f"- `{s['name']}`: {s.get('description', '')}" for s in report.get("systems", [])]
    return (["## Workloads and systems", ""]
            + _table(["Workload", "id", "shape", "prefix-heavy", "forks", "constraints"], rows, text_columns=6)
            + [""] + systems + [""])


def render(report: dict[str, Any], json_path: str = "bench/results.json") -> str:
    """RESULTS.md text for `report` (see the module docstring for its layout)."""
    lines = ["# sglc evaluation results (issue #7)", "",
             f"Generated by `bench/report.py` from `{json_path}`; do not edit by hand "
             "(re-render with `python -m bench.report --from-json PATH`). Plots: `plots/`.", ""]
    for section in (_how_run, _throughput, _latency_hits, _ablation, _model_work, _jump_forward, _targets, _errors,
                    _workloads):
        lines += section(report)
    return "\n".join(lines).rstrip() + "\n"
