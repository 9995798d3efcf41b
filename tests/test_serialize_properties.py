"""Property tests: random valid graphs round-trip through graph.pb exactly."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ir_strategies import attr_values, valid_graphs
from sglc.ir import Graph, Op
from sglc.ir.serialize import decode, encode
from sglc.ir.verify import verify

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(valid_graphs())
def test_random_valid_graphs_round_trip_exactly(g: Graph):
    """For any valid graph, decode(encode(g)) == g and re-encoding gives the same bytes."""
    verify(g)  # the generator only makes valid graphs
    data = encode(g)
    back = decode(data)
    assert back == g
    assert encode(back) == data
    assert str(back) == str(g)


@_SETTINGS
@given(st.dictionaries(st.text(max_size=8), attr_values, max_size=6))
def test_random_attribute_values_round_trip_exactly(extra: dict):
    """Any attribute value (nested lists/dicts, bytes, unicode, big ints, signed zeros) keeps kind and order."""
    g = Graph()
    g.meta = dict(extra)
    g.create_node(Op.GEN, attrs={"name": "x", **{f"x_{k}": v for k, v in extra.items()}})
    back = decode(encode(g))
    assert back == g
    assert repr(back.meta) == repr(g.meta)  # order and float signs, not just equality


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_fail_cleanly(data: bytes):
    """Any byte string either decodes to a graph that verifies or raises GraphFormatError — nothing else."""
    from sglc.errors import GraphFormatError

    try:
        g = decode(data)
    except GraphFormatError:
        return
    verify(g)
