"""A lowered FSM travels as the typed sglc.fsm.FSM message (proto/fsm.proto), in graph.pb and in
GenerateRequest alike: exact round trips, and untrusted sizes refused before anything is copied."""
from __future__ import annotations

import pytest

from sglc import fsm
from sglc.fsm.errors import FSMFormatError
from sglc.ir import Graph, Op
from sglc.ir.serialize import decode, encode
from sglc.passes.lower_constraints import lower_constraints
from sglc.wire import client_convert, server_convert
from sglc.wire.backend import GenParams
from sglc.wire.fsm_message import fsm_from_pb, fsm_to_pb
from sglc.wire.proto import graph_pb2, runtime_pb2

PATTERN = r"[0-9]{2}-(yes|no)"


def lowered() -> dict:
    return fsm.fsm_to_dict(fsm.compile_regex(PATTERN))


def test_dict_message_dict_is_exact_and_rebuilds_the_same_fsm():
    """fsm_from_pb(fsm_to_pb(d)) == d, and the FSM it rebuilds is the compiled one."""
    d = lowered()
    back = fsm_from_pb(fsm_to_pb(d))
    assert back == d and list(back) == list(d)
    assert fsm.fsm_from_dict(back) == fsm.compile_regex(PATTERN)


@pytest.mark.parametrize("claim, limit", [
    (dict(num_states=1000, num_classes=10**7), "max_dfa_cells"),
    (dict(num_states=10**9, num_classes=1), "max_dfa_states"),
])
def test_oversized_claims_are_refused_by_the_budget_before_copying(claim, limit):
    """A message claiming a huge table is refused naming the compile-budget limit."""
    msg = fsm_to_pb(lowered())
    for key, value in claim.items():
        setattr(msg, key, value)
    with pytest.raises(fsm.CompileBudgetError, match=limit):
        fsm_from_pb(msg)


def test_lists_longer_than_the_stated_table_and_newer_layouts_are_refused():
    """More transitions than num_states x num_classes x 3 allow, or a newer layout version: FSMFormatError."""
    msg = fsm_to_pb(lowered())
    msg.transitions.extend([0] * (3 * msg.num_states * msg.num_classes + 3))
    with pytest.raises(FSMFormatError, match="transitions"):
        fsm_from_pb(msg)
    with pytest.raises(FSMFormatError, match="version"):
        fsm_from_pb(fsm_to_pb(lowered()).__class__(version=2))


def test_a_dict_that_does_not_fit_the_message_is_refused():
    """Extra keys, negative or fractional numbers cannot become an FSM message (nothing is dropped silently)."""
    for broken in ({**lowered(), "extra": 1}, {**lowered(), "initial": -1}, {**lowered(), "num_states": 1.5}):
        with pytest.raises(FSMFormatError):
            fsm_to_pb(broken)


def test_graph_pb_format_3_stores_a_lowered_fsm_as_the_typed_message():
    """encode() writes a gen's fsm as AttrValue.fsm_value; decode gives back the same dict."""
    g = Graph("lowered")
    g.create_node(Op.GEN, attrs={"name": "x", "regex": PATTERN}, meta={"source": "p.py:3"})
    g = lower_constraints(g).graph
    data = encode(g)
    msg = graph_pb2.Graph()
    msg.ParseFromString(data)
    (entry,) = [e for e in msg.nodes[0].attrs.entries if e.key == "fsm"]
    assert entry.value.WhichOneof("kind") == "fsm_value" and entry.value.fsm_value.pattern == PATTERN
    assert decode(data) == g


def test_generate_request_carries_the_fsm_as_a_message_both_ways():
    """GenParams.fsm -> SamplingParams.fsm (typed, no JSON) -> the server's fsm dict, unchanged."""
    sampling = client_convert.gen_params_to_pb(GenParams(fsm=lowered()))
    assert sampling.WhichOneof("constraint") == "fsm"
    fields = server_convert.sampling_fields_from_pb(runtime_pb2.GenerateRequest(sampling=sampling))
    assert fields["fsm"] == lowered()
