"""ProgramTable's memory model (issue 28): what a program is expected to need, learned per family.

The scheduler-level behaviour built on it (new programs wait while memory is tight, provisional
starts) is in test_program_retention.py and test_native_engine.py.
"""
from __future__ import annotations

from sglc.wire.program_hint import ProgramHint
from sglc_runtime.scheduling.program_table import ProgramTable


class _Call:
    """What ProgramTable reads of a request: its hint and, once admitted, its program's rank."""

    def __init__(self, program_id: str) -> None:
        self.hint, self.program_rank = ProgramHint(program_id), None


def test_a_program_is_expected_to_need_its_first_call_plus_its_familys_growth():
    """A family's runs grow by the same graph, but where they start depends on the cache: the first
    run of an agent pays its memory block, the others find it cached. Each is expected to need
    what its own first call needed plus the growth the family's ended runs showed."""
    table = ProgramTable()
    first = _Call("agents:1")
    table.on_admitted(first, 500, 0)  # the agent's block and its first question, nothing cached
    table.on_admitted(_Call("agents:1"), 560, 500)  # its last call: 60 tokens more
    assert table.end("agents:1") and table.family_growth("agents:2") == 60
    assert table.expected_new(_Call("agents:2"), 40) == 100  # the block cached: 40 tokens of its own
    assert table.expected_new(_Call("agents:3"), 500) == 560  # another agent's block: not cached
    table.on_admitted(_Call("agents:2"), 540, 500)
    table.on_admitted(_Call("agents:3"), 500, 0)
    assert table.expected_in_flight() == 100 + 560
    table.on_admitted(_Call("agents:2"), 620, 500)  # a run that grows past its family's: its own counts
    assert table.expected_in_flight() == 120 + 560
    assert table.end("agents:2") and table.family_growth("agents:9") == 70  # the mean of 60 and 80
    assert table.expected_new(_Call("plain"), 40) == 40  # a family with no ended run: no growth known yet
