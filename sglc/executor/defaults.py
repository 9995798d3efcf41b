"""The executor's concurrency defaults, in a module of their own: the command line shows them in
`sglc run --help` without importing the executor (its FSM compiler, lark and numpy: ~0.2 s of
every `sglc` command's start, `sglc serve` included)."""

#: inputs in flight at once (batch.py)
DEFAULT_CONCURRENCY = 8
#: model calls in flight per program, e.g. fork branches (graph_executor.py)
DEFAULT_MAX_PARALLEL = 16
