"""The table of bench/run_levels_vs_llamacpp.sh's runs: per CPU level and workload, sglc and
llama-server run by run, and their ratios (how many times better sglc is, for both units).

    python bench/levels_table.py [bench/out/levels]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_vs_llamacpp import WORKLOADS, rows  # noqa: E402


def load(folder: Path) -> dict[tuple[str, str], list[dict[str, float]]]:
    """(level, server) -> each run's figures, in run order."""
    runs: dict[tuple[str, str], list[tuple[int, dict[str, float]]]] = {}
    for path in folder.glob("*-*-*.json"):
        level, server, run = path.stem.rsplit("-", 2)
        results = json.loads(path.read_text())["results"]
        runs.setdefault((level, server), []).append((int(run), next(iter(results.values()))))
    return {key: [r for _, r in sorted(v)] for key, v in runs.items()}


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "out" / "levels"
    runs = load(folder)
    for level in ("native", "avx2"):
        sglc, llama = runs.get((level, "sglc"), []), runs.get((level, "llama"), [])
        if not sglc or not llama:
            continue
        print(f"\n{level}:\n| workload | sglc runs | llama-server runs | sglc / llama-server |\n|---|--:|--:|--:|")
        for i in range(len(WORKLOADS)):
            for label, unit, higher in rows(i):
                ours = [r[label] for r in sglc if label in r]
                theirs = [r[label] for r in llama if label in r]
                if not ours or not theirs:
                    continue
                ratios = [(a / b if higher else b / a) for a, b in zip(ours, theirs)]
                fmt = (lambda v: f"{v:.3f}") if unit == "s" and min(ours + theirs) < 1 else (lambda v: f"{v:.1f}")
                print(f"| {label} ({unit}) | {' / '.join(map(fmt, ours))} | {' / '.join(map(fmt, theirs))} | "
                      f"{' / '.join(f'{r:.2f}x' for r in ratios)} |")


if __name__ == "__main__":
    main()
