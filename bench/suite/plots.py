"""PNG plots from a report json (layout: bench.suite.markdown's docstring), in the paper's shapes.

- throughput.png (Fig. 5): per workload, throughput normalized to hf-per-call for sglc, no-cache
  and hf-per-call (= 1);
- hit_rate.png (Fig. 13): sglc's achieved vs optimal cache hit rate per workload;
- ablation.png (Fig. 8c): each feature-off system's throughput relative to sglc per workload
  (n/a and missing runs omitted);
- latency.png: one program alone, sglc vs hf-per-call.

A plot with no data to show is not written (the function returns None).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bench.suite.markdown import HF, NO_CACHE, SGLC, ok, system_names, throughput_ratio


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # NOTE: no display; must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


def _grouped_bars(labels: list[str], series: dict[str, list[Optional[float]]], ylabel: str, title: str,
                  path: Path, reference: Optional[float] = None) -> Optional[Path]:
    """Bars grouped by label, one colour per series; None values leave a gap. None if nothing to plot."""
    if not labels or not any(v is not None for vs in series.values() for v in vs):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(labels) + 2), 4.2))
    width = 0.8 / max(1, len(series))
    for k, (name, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i, v in enumerate(values) if v is not None]
        ys = [v for v in values if v is not None]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, labels=[f"{y:.3g}" for y in ys], fontsize=6, padding=1)
    if reference is not None:
        ax.axhline(reference, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    top = max([v for vs in series.values() for v in vs if v is not None] + [reference or 0.0])
    ax.set_ylim(0, top * 1.35)  # NOTE: headroom so the legend (top, in columns) never hides a bar
    ax.legend(fontsize=7, loc="upper left", ncol=min(3, len(series)))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_throughput(report: dict[str, Any], path: Path) -> Optional[Path]:
    """Fig. 5 shape: programs/s normalized to hf-per-call, per workload (workloads without HF omitted)."""
    workloads = [w for w in report["workloads"] if ok(w, HF)]
    systems = [s for s in (SGLC, NO_CACHE, HF) if s in system_names(report)]
    series = {s: [throughput_ratio(w, s, HF) for w in workloads] for s in systems}
    return _grouped_bars([w["name"] for w in workloads], series, "throughput / hf-per-call",
                         "Throughput normalized to HF per call (higher is better)", path, reference=1.0)


def plot_hit_rate(report: dict[str, Any], path: Path) -> Optional[Path]:
    """Fig. 13 shape: achieved vs optimal cache hit rate (sglc), per workload."""
    workloads = [w for w in report["workloads"] if ok(w, SGLC) and ok(w, SGLC).get("optimal_hit_rate") is not None]
    series = {"achieved": [100 * ok(w, SGLC)["hit_rate"] for w in workloads],
              "optimal (Theorem 3.1)": [100 * ok(w, SGLC)["optimal_hit_rate"] for w in workloads]}
    return _grouped_bars([w["name"] for w in workloads], series, "cache hit rate (%)",
                         "Cache hit rate: achieved vs optimal (sglc)", path)


def plot_ablation(report: dict[str, Any], path: Path) -> Optional[Path]:
    """Fig. 8c shape: each feature-off system's throughput relative to sglc; n/a omitted."""
    names = [n for n in system_names(report) if n not in (SGLC, HF)]
    workloads = report["workloads"]
    series = {n: [throughput_ratio(w, n, SGLC) for w in workloads] for n in names}
    return _grouped_bars([w["name"] for w in workloads], series, "throughput / sglc",
                         "Ablation: one feature off (1.0 = sglc all on)", path, reference=1.0)


def plot_latency(report: dict[str, Any], path: Path) -> Optional[Path]:
    """Mean latency of one program alone, sglc vs hf-per-call, per workload."""
    workloads = report["workloads"]
    series = {s: [(ok(w, s) or {}).get("latency_s") for w in workloads] for s in (SGLC, HF)
              if s in system_names(report)}
    return _grouped_bars([w["name"] for w in workloads], series, "seconds (lower is better)",
                         "Latency of one program alone (cold cache)", path)


PLOTS = {"throughput.png": plot_throughput, "hit_rate.png": plot_hit_rate, "ablation.png": plot_ablation,
         "latency.png": plot_latency}


def write_plots(report: dict[str, Any], directory: Path) -> list[Path]:
    """Write every plot that has data into `directory` (created if needed); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, plot in PLOTS.items():
        target = directory / filename
        if plot(report, target) is not None:
            written.append(target)
        elif target.exists():
            target.unlink()  # NOTE: a stale plot from an earlier report must not pass for this one's
    return written
