"""SGLang's REAL frontend (the `sglang` package: pyproject's sglang-client and sglang-nodeps extras) drives ONE `sglc serve`
subprocess over HTTP (`sglang.RuntimeEndpoint`), and every value it gets is checked: the same program
run by our own client (`import sglc`, gRPC) on the same server gives the same greedy values, select
picks what our scorer picks, constrained gens match their constraint.

Each program is written once as `make(m)` and built with m = sglang or m = sglc.
"""
from __future__ import annotations

import json
import re

import pytest
import sglang

import sglc
from grpc_helpers import serve_http_fixture

pytestmark = pytest.mark.model


server = serve_http_fixture(16384)


@pytest.fixture(scope="module")
def theirs(server):
    """SGLang's own HTTP client of our server."""
    return sglang.RuntimeEndpoint(server.http)


@pytest.fixture(scope="module")
def ours(server):
    """Our own client (gRPC) of the same server: the reference values."""
    backend = sglc.RuntimeEndpoint(server.address)
    yield backend
    backend.close()


def run_both(make, theirs, ours, **kwargs):
    """(SGLang's state, our state) of the program `make(m)` run with each frontend."""
    sg_state = make(sglang).run(backend=theirs, **kwargs)
    our_state = make(sglc).run(backend=ours, **kwargs)
    return sg_state, our_state


def qa(m):
    @m.function
    def prog(s, question):
        s += "Q: " + question + "\nA:"
        s += m.gen("answer", max_tokens=24, stop="\n", temperature=0)
    return prog


def test_gen_with_max_tokens_and_stop_gets_our_greedy_answer(theirs, ours):
    """A gen with max_tokens and a stop string: SGLang's client gets exactly our client's greedy answer,
    without the stop string."""
    sg, us = run_both(qa, theirs, ours, question="What is the capital of France?")
    assert sg["answer"] == us["answer"] and sg["answer"].strip()
    assert "\n" not in sg["answer"]
    meta = sg.get_meta_info("answer")
    assert meta["completion_tokens"] <= 24 and meta["finish_reason"]["type"] in ("stop", "length")


def test_max_tokens_bounds_the_answer(theirs):
    """max_tokens=3 with no stop: exactly 3 tokens come back (finish_reason length)."""
    @sglang.function
    def prog(s):
        s += "Count: one, two, three,"
        s += sglang.gen("more", max_tokens=3, temperature=0)

    state = prog.run(backend=theirs)
    meta = state.get_meta_info("more")
    assert meta["completion_tokens"] == 3 and meta["finish_reason"] == {"type": "length", "length": 3}
    assert state["more"]


@pytest.mark.parametrize("method", ["token_length_normalized", "greedy_token_selection"])
def test_select_picks_the_choice_our_scorer_picks(theirs, ours, method):
    """select with each of SGLang's scoring methods: SGLang's client (its prefix + logprob requests,
    token healing check, its own scoring) decides the same as our scorer."""
    def make(m):
        @m.function
        def prog(s, question, choices):
            s += "Q: " + question + "\nA:"
            s += m.select("pick", choices=choices, choices_method=getattr(m, method))
        return prog

    cases = [("What is the capital of France?", [" Paris", " London", " Berlin"]),
             ("Is the sky blue on a clear day? Answer yes or no.", [" yes", " no"]),
             ("What is 2 + 2?", [" 4", " 22", " five"])]
    for question, choices in cases:
        sg, us = run_both(make, theirs, ours, question=question, choices=choices)
        assert sg["pick"] in choices
        if method != "greedy_token_selection":
            assert sg["pick"] == us["pick"], (question, method)
            continue
        # NOTE: greedy_token_selection keeps the choices whose logprob at a position EQUALS the
        # best (float ==), so where choices share tokens (" 4" / " 22" start with the same " ",
        # and SGLang's client also scores the prompt's last tokens) both clients decide on the
        # last bits of equal quantities computed in requests of different lengths, which no
        # server keeps bit-identical (SGLang's only in its deterministic mode). What must hold:
        # both clients got the same logprobs, and decide alike once equal means equal to 1e-4.
        theirs_rows = [[t[0] for t in row] for row in sg.get_meta_info("pick")["input_token_logprobs"]]
        ours_rows = us.get_meta_info("pick")["choice_token_logprobs"]
        for t_row, o_row in zip(theirs_rows, ours_rows):
            assert t_row[-len(o_row):] == pytest.approx(o_row, abs=1e-4), (question, t_row, o_row)
        assert greedy_within(theirs_rows, 1e-4) == greedy_within(ours_rows, 1e-4), (question, theirs_rows, ours_rows)
    assert sg.get_meta_info("pick")["input_token_logprobs"]  # the triples SGLang's scorer used


def greedy_within(rows: list[list[float]], tol: float) -> int:
    """SGLang's greedy_token_selection (a short row padded with its mean), ties within `tol`."""
    width = max(len(r) for r in rows)
    matrix = [r + [sum(r) / len(r)] * (width - len(r)) for r in rows]
    remaining = list(range(len(rows)))
    for j in range(width):
        best = max(matrix[i][j] for i in remaining)
        remaining = [i for i in remaining if matrix[i][j] >= best - tol]
        if len(remaining) == 1:
            break
    return remaining[0]


def tips(m):
    @m.function
    def prog(s, topic):
        s += "Two tips about " + topic + ".\n"
        forks = s.fork(2)
        for i, f in enumerate(forks):
            f += f"Tip {i + 1}:" + m.gen("tip", max_tokens=16, stop=".", temperature=0)
        forks.join()
        s += "Tip 1:" + forks[0]["tip"] + "\nTip 2:" + forks[1]["tip"] + "\nSummary:"
        s += m.gen("summary", max_tokens=12, stop=".", temperature=0)
    return prog


def test_fork_and_join_get_our_values(theirs, ours):
    """fork(2) + join: both branches' gens and the gen after the join equal our client's."""
    sg, us = run_both(tips, theirs, ours, topic="staying healthy")
    assert sg["summary"] == us["summary"]
    assert sg.text() == us.text()
    assert "Tip 2:" in sg.text()


def test_regex_gen_matches_and_equals_ours(theirs, ours):
    """gen(regex=...): the output matches the regex (Python `re` is the oracle) and equals ours."""
    pattern = r"[0-9]{3}-[0-9]{4}"

    def make(m):
        @m.function
        def prog(s):
            s += "Call me at 555-0199 or at "
            s += m.gen("phone", regex=pattern, max_tokens=16, temperature=0)
        return prog

    sg, us = run_both(make, theirs, ours)
    assert re.fullmatch(pattern, sg["phone"]), sg["phone"]
    assert sg["phone"] == us["phone"]


def test_typed_int_gen_is_an_integer(theirs):
    """gen(dtype=int): SGLang's client lowers it to its REGEX_INT plus stops; the value is an integer."""
    @sglang.function
    def prog(s):
        s += "Q: How many legs does a spider have?\nA: "
        s += sglang.gen("legs", dtype=int, max_tokens=8, temperature=0)

    state = prog.run(backend=theirs)
    assert re.fullmatch(r"-?[0-9]+", state["legs"].strip()), state["legs"]
    int(state["legs"])


def test_json_schema_gen_is_valid_json_of_the_schema(theirs, ours):
    """gen(json_schema=...): SGLang's client sends the schema; the answer parses to the schema's
    shape, equal to ours."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}

    def make(m):
        @m.function
        def prog(s):
            s += "A person as JSON:\n"
            s += m.gen("person", json_schema=json.dumps(schema), max_tokens=48, temperature=0)
        return prog

    sg, us = run_both(make, theirs, ours)
    person = json.loads(sg["person"])
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)
    assert sg["person"] == us["person"]


def test_run_batch_gets_each_answer_in_order(theirs, ours):
    """run_batch: one state per input, in input order, each equal to our client's answer."""
    questions = ["What is the capital of Italy?", "What color is grass?", "What is 3 + 4?"]
    sg_states = qa(sglang).run_batch([{"question": q} for q in questions], backend=theirs)
    our_states = qa(sglc).run_batch([{"question": q} for q in questions], backend=ours)
    assert [s["answer"] for s in sg_states] == [s["answer"] for s in our_states]
    assert all(s["answer"].strip() for s in sg_states)


def test_streaming_text_iter_adds_up_to_the_answer(theirs):
    """run(stream=True) + text_iter(var): the chunks (from our SSE stream of cumulative text) join to
    the same answer as the non-streamed run, in more than one piece."""
    prog = qa(sglang)
    full = prog.run(backend=theirs, question="Name three colors of the rainbow.")
    state = prog.run(backend=theirs, question="Name three colors of the rainbow.", stream=True)
    pieces = list(state.text_iter("answer"))
    assert "".join(pieces) == full["answer"]
    assert len([p for p in pieces if p]) > 1


def test_server_info_and_flush_cache_through_the_client(theirs):
    """RuntimeEndpoint.get_server_info (GET /server_info) and flush_cache (POST /flush_cache) succeed."""
    info = theirs.get_server_info()
    assert info["dp_size"] == 1 and "max_total_num_tokens" in info
    theirs.flush_cache()  # raises on a non-200 answer
    assert theirs.get_model_name() == theirs.model_info["model_path"]
