"""The paper-evaluation suite: workloads, systems, runner, hit-rate bound, HF baseline (issue #7)."""
