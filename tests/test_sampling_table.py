"""sglc.wire.sampling_table is THE definition of every sampling parameter: the DSL, the IR, the
executor's GenParams, runtime.proto and the runtime's SamplingParams all follow it."""
from __future__ import annotations

import dataclasses

import pytest

import sglc as sgl
from sglc.executor.semantics import DEFAULT_SAMPLING, RUN_SAMPLING_KEYS
from sglc.frontend.params import SAMPLING_CHECKS
from sglc.ir import Graph, Op
from sglc.ir.op_rules import SAMPLING_ATTRS
from sglc.ir.verify import verify
from sglc.wire import client_convert, sampling_table, server_convert
from sglc.wire.backend import GenParams
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.sampling_table import BY_DSL, BY_NAME, BY_RUN, GEN_ATTRS, GEN_FIELDS, PROTO, RUNTIME, TABLE
from sglc_runtime.sampling.sampling_params import SamplingParams

#: One valid non-default value per kind (by runtime name where the kind is not enough).
SAMPLE = {"max_new_tokens": 7, "min_new_tokens": 2, "stop": ["\n", "END"], "stop_token_ids": [3, 5],
          "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "frequency_penalty": 0.5,
          "presence_penalty": -0.5, "repetition_penalty": 1.2, "seed": 11, "ignore_eos": True,
          "skip_special_tokens": False, "return_logprob": True, "top_logprobs_num": 3, "logprob_start_len": 0,
          "return_text_in_logprobs": True, "stop_regex": ["[0-9]+ apples"], "no_stop_trim": True}

#: Values out of each numeric row's range (just past a bound).
OUT_OF_RANGE = [(row, value) for row in TABLE if row.kind in ("int", "float")
                for value in ([row.low - 1] if not row.low_open else [row.low]) + ([row.high + 1] if row.high else [])
                if value not in row.special]


def test_every_row_is_complete_and_its_default_passes_its_own_check():
    """Each row has a sample here, and its default (when it has one) is a valid value."""
    assert set(SAMPLE) == set(BY_NAME)
    for row in TABLE:
        assert row.check(SAMPLE[row.name]) is not None
        if row.default is not None:
            assert row.check(row.default) == row.default, row.name


def test_each_edge_has_exactly_the_table_rows_it_spells():
    """DSL checks = the DSL rows by their DSL keyword, IR attribute rules = the same rows by name;
    GenParams fields and run keywords = the run rows; runtime.proto's SamplingParams scalars = the
    proto rows; SamplingParams = the runtime rows. Inside (IR, GenParams, proto, runtime) every
    row is spelled by its name."""
    assert set(SAMPLING_CHECKS) == set(BY_DSL)
    assert set(SAMPLING_ATTRS) == set(GEN_ATTRS) == {row.name for row in BY_DSL.values()}
    assert RUN_SAMPLING_KEYS == {key: row.name for key, row in BY_RUN.items()}
    # NOTE: besides the sampling rows, a gen's constraint and its logprob request (not sampling)
    assert [f.name for f in dataclasses.fields(GenParams)] == [*GEN_FIELDS, "regex", "json_schema", "fsm", "ebnf",
                                                               "ebnf_from_json_schema", "logprobs"]
    assert all(row.proto in (None, row.name) for row in TABLE)
    # NOTE: every GenParams field reaches every backend: runtime.proto, OpenAI and SGLang spell it
    assert all(row.proto and row.openai and row.sglang for row in GEN_FIELDS.values())
    proto_fields = {f.name for f in pb.SamplingParams.DESCRIPTOR.fields} - {"regex", "json_schema", "fsm", "ebnf"}
    assert proto_fields == {row.proto for row in PROTO}
    runtime_fields = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
    assert {row.name: row.default for row in RUNTIME}.items() <= runtime_fields.items()


def test_runtime_defaults_are_the_table_defaults():
    """SamplingParams() holds every runtime row's default (list rows as empty lists)."""
    params = SamplingParams()
    for row in RUNTIME:
        assert getattr(params, row.name) == ([] if row.default is None and row.kind.endswith(("list", "ids"))
                                             else row.default), row.name
    assert DEFAULT_SAMPLING == {"max_new_tokens": BY_NAME["max_new_tokens"].default,
                                "temperature": BY_NAME["temperature"].default}


def test_gen_params_cross_the_wire_into_sampling_params_unchanged():
    """Every GenParams field survives GenParams -> runtime.proto -> SamplingParams under its runtime name."""
    values = {name: SAMPLE[name] for name in GEN_FIELDS}
    request = pb.GenerateRequest(sampling=client_convert.gen_params_to_pb(GenParams(**values)))
    fields = server_convert.sampling_fields_from_pb(request)
    assert fields == values == sampling_table.set_fields(GenParams(**values))
    params = SamplingParams(**fields)
    for name, value in fields.items():
        assert getattr(params, name) == value, name


@pytest.mark.parametrize("row,value", OUT_OF_RANGE, ids=[f"{r.name}={v}" for r, v in OUT_OF_RANGE])
def test_a_value_out_of_range_is_refused_at_every_edge(row, value):
    """The DSL (at the user's line), the IR verifier and SamplingParams refuse the same values."""
    with pytest.raises(ValueError, match=row.name):
        SamplingParams(**{row.name: value})
    if row.dsl is None:
        return
    with pytest.raises(ValueError, match=row.dsl):
        sgl.gen("x", **{row.dsl: value})
    g = Graph()
    g.create_node(Op.GEN, attrs={"name": "x", row.name: value})
    with pytest.raises(Exception, match=row.name):
        verify(g)


def test_a_gen_asks_for_at_least_one_token_while_a_request_may_ask_for_none():
    """max_tokens=0 is a DSL error; max_new_tokens=0 (prefill only) is a valid request."""
    with pytest.raises(ValueError, match="max_tokens"):
        sgl.gen("x", max_tokens=0)
    assert SamplingParams(max_new_tokens=0).max_new_tokens == 0


def test_unknown_sampling_keywords_and_two_constraints_are_refused_once():
    """gen(...) refuses a keyword no row spells and a second constraint, with one message each."""
    with pytest.raises(TypeError, match="max_new_tokens"):
        sgl.gen("x", max_new_tokens=3)  # the runtime's spelling is not the DSL's
    with pytest.raises(ValueError, match="at most one constraint, got regex, dtype"):
        sgl.gen("x", regex="a", dtype=int)
    with pytest.raises(ValueError, match="at most one constraint, got regex, json_schema"):
        client_convert.gen_params_to_pb(GenParams(regex="a", json_schema="{}"))
