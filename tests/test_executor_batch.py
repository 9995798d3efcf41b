"""Batches: input order, failure isolation, bounded concurrency, the batch prefix hint (scripted
backend from test_executor_support.py, a test double for the executor's own logic)."""
from __future__ import annotations

import io
import json
import threading

from test_executor_support import ScriptedBackend

import sglc as sgl
from sglc.executor.batch import run_graph_batch
from sglc.executor.results import OrderedJsonlWriter, ProgramResult

WAIT = 20.0


@sgl.function
def answer(s, q):
    s += sgl.system("You answer questions.")
    s += sgl.user(q)
    s += sgl.assistant(sgl.gen("a", max_tokens=4))


def test_writer_emits_each_line_once_it_and_all_earlier_ones_are_done():
    """Results arriving as 2, 0, 1 are written 0 (at once), then 1 and 2 (when 1 arrives)."""
    out = io.StringIO()
    writer = OrderedJsonlWriter(out)
    writer.add(ProgramResult(index=2, arguments={"q": "c"}))
    assert out.getvalue() == ""
    writer.add(ProgramResult(index=0, arguments={"q": "a"}))
    assert [json.loads(x)["index"] for x in out.getvalue().splitlines()] == [0]
    writer.add(ProgramResult(index=1, arguments={"q": "b"}))
    assert [json.loads(x)["index"] for x in out.getvalue().splitlines()] == [0, 1, 2]


def test_results_come_back_in_input_order_even_when_they_finish_out_of_order():
    """Input 0 finishes last (it waits for input 2); the JSONL is still 0, 1, 2."""
    done_2 = threading.Event()

    def hook(kind, prompt):
        if kind == "gen" and "first" in prompt.text and not done_2.wait(WAIT):
            raise RuntimeError("input 2 never finished while input 0 waited")

    def on_result(result):
        if result.index == 2:
            done_2.set()

    out = io.StringIO()
    graph = answer.compile().graph
    inputs = [{"q": "first"}, {"q": "second"}, {"q": "third"}]
    results = run_graph_batch(graph, ScriptedBackend(on_call=hook), inputs, concurrency=3,
                              writer=OrderedJsonlWriter(out), on_result=on_result)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["index"] for r in lines] == [0, 1, 2] and [r.index for r in results] == [0, 1, 2]
    assert [r["arguments"]["q"] for r in lines] == ["first", "second", "third"]
    assert all(r["error"] is None for r in lines)


def test_a_failing_input_does_not_lose_the_others():
    """Input 1's backend call fails: its line has the error, inputs 0 and 2 have their results."""
    def hook(kind, prompt):
        if kind == "gen" and "poison" in prompt.text:
            raise ConnectionError("server closed the stream")

    out = io.StringIO()
    inputs = [{"q": "fine"}, {"q": "poison"}, {"q": "also fine"}]
    run_graph_batch(answer.compile().graph, ScriptedBackend(on_call=hook), inputs, writer=OrderedJsonlWriter(out))
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["error"] is None for r in lines] == [True, False, True]
    assert "while executing %a (gen)" in lines[1]["error"] and "server closed the stream" in lines[1]["error"]
    assert lines[0]["variables"]["a"] and lines[2]["variables"]["a"]
    assert lines[1]["variables"] == {} and lines[1]["arguments"] == {"q": "poison"}


def test_a_bad_argument_fails_only_its_input():
    """An input with an unknown argument is reported; the rest run."""
    out = io.StringIO()
    run_graph_batch(answer.compile().graph, ScriptedBackend(), [{"q": "x"}, {"question": "y"}],
                    writer=OrderedJsonlWriter(out))
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert lines[0]["error"] is None and lines[1]["error"].startswith("unknown argument(s) question")


def test_concurrency_bounds_the_programs_in_flight():
    """concurrency=2 with one call per program: never more than 2 calls at once over 6 inputs."""
    backend = ScriptedBackend()
    results = run_graph_batch(answer.compile().graph, backend, [{"q": str(i)} for i in range(6)], concurrency=2)
    assert all(r.error is None for r in results)
    assert backend.max_in_flight <= 2


def test_the_batch_prefix_is_hinted_once_before_any_input_runs():
    """The constant system/user prefix is sent as one cache_prefix before every input's gen."""
    backend = ScriptedBackend()
    results = run_graph_batch(answer.compile().graph, backend, [{"q": "a"}, {"q": "b"}, {"q": "c"}], concurrency=3)
    assert all(r.error is None for r in results)
    kinds = backend.kinds()
    assert kinds[0] == "cache_prefix" and kinds.count("cache_prefix") == 1 and kinds.count("gen") == 3
    prefix = backend.calls[0][1]
    assert prefix == "<|im_start|>system\nYou answer questions.<|im_end|>\n<|im_start|>user\n"
    assert all(text.startswith(prefix) for kind, text in backend.calls if kind == "gen")


def test_call_records_carry_the_backend_meta_in_node_order():
    """Each result lists its calls with node, op, stream and the backend's token counts."""
    [result] = run_graph_batch(answer.compile().graph, ScriptedBackend(), [{"q": "why?"}])
    [call] = [c.to_json() for c in result.calls]
    assert call["node"] == "a" and call["op"] == "gen" and call["stream"] == 0
    assert call["prompt_tokens"] == len(result.text) - len(result.variables["a"]) - len("<|im_end|>\n")
    assert set(call) == {"node", "op", "stream", "prompt_tokens", "cached_tokens", "completion_tokens",
                         "finish_reason", "latency_s"}


def test_a_dead_backend_fails_every_input_without_crashing_the_batch():
    """model_info and every call raise: the batch hint is skipped and each input reports the reason."""
    class Dead(ScriptedBackend):
        def model_info(self):
            raise ConnectionError("connection refused")

    def refuse(kind, prompt):
        raise ConnectionError("connection refused")

    out = io.StringIO()
    results = run_graph_batch(answer.compile().graph, Dead(on_call=refuse), [{"q": "a"}, {"q": "b"}],
                              writer=OrderedJsonlWriter(out))
    assert [r.index for r in results] == [0, 1]
    assert all(r.error and "connection refused" in r.error and r.error.startswith("while executing %")
               for r in results)
    assert len(out.getvalue().splitlines()) == 2
