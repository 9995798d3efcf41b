"""Program hints (issue 28), the executor's side: every call's next_use read off the compiled graph
(sglc/executor/program_hints.py), one fresh program id per run on every call's prompt, one
end_program per run, and `program_hints=False` / `--program-hints off` sending none.

What the executor emits is recorded by a Backend subclass (it tests the executor's output, not the
runtime); the client tests check how srt and the SGLang-wire backend put a hint on the wire.
"""
from __future__ import annotations

import json
import threading
from collections import Counter

import grpc
import pytest
from grpc_helpers import runtime_fixture
from test_executor_support import ScriptedBackend

import sglc as sgl
from sglc.executor.execution_plan import ExecutionPlan
from sglc.executor.graph_executor import GraphExecutor
from sglc.executor.program_hints import NextUse
from sglc.ir.ops import Op
from sglc.wire import client_convert
from sglc.wire.backend import GenParams, Prompt
from sglc.wire.program_hint import NEVER, ProgramHint

# ----- programs -----


@sgl.function
def chain(s, q):
    s += "Q: " + q + "\nThink:" + sgl.gen("think", max_tokens=4) + "\nAnswer:" + sgl.gen("answer", max_tokens=4)


@sgl.function
def tree_of_thought(s, q):
    s += "Q: " + q + "\nPlan:" + sgl.gen("plan", max_tokens=4)
    forks = s.fork(3)
    for f in forks:
        f += "\nIdea:" + sgl.gen("idea", max_tokens=4)
    forks.join()
    s += "\nBest:" + sgl.gen("best", max_tokens=4)


@sgl.function
def select_then_gen(s, q):
    s += q + "\nKind:" + sgl.select("kind", choices=["math", "chat"]) + "\nWhy:" + sgl.gen("why", max_tokens=4)


@sgl.function
def loop_only(s, items):
    s += "Items:\n"
    for it in items:
        s += "Item " + it + ":" + sgl.gen("a", max_tokens=3) + "\n"
    s += "Done."


@sgl.function
def loop_then_gen(s, items):
    s += "Items:\n"
    for it in items:
        s += "Item " + it + ":" + sgl.gen("a", max_tokens=3) + "\n"
    s += "Summary:" + sgl.gen("z", max_tokens=3)


@sgl.function
def branch_on_select(s, q):
    s += q + sgl.select("kind", choices=["math", "chat"])
    if s["kind"] == "math":
        s += "Compute:" + sgl.gen("m", max_tokens=3)
    else:
        s += "Talk:" + sgl.gen("c", max_tokens=3)
    s += "Done:" + sgl.gen("d", max_tokens=3)


@sgl.function
def multi_turn(s, q1, q2):
    s += sgl.system("You are brief.")
    s += sgl.user(q1)
    s += sgl.assistant(sgl.gen("a1", max_tokens=4))
    s += sgl.user(q2)
    s += sgl.assistant(sgl.gen("a2", max_tokens=4))


@sgl.function
def helper(s, topic):
    s += "Topic: " + topic + sgl.gen("x", max_tokens=3) + sgl.gen("y", max_tokens=3)


@sgl.function
def calls_helper(s, topic):
    s += "Topic: " + topic + sgl.gen("first", max_tokens=3)
    sub = helper(topic=topic)
    s += "\nHelper said:" + sub["y"] + "\nNext:" + sgl.gen("second", max_tokens=3)


@sgl.function
def with_break(s, question):
    s += "Q: " + question + "\nExpr:" + sgl.gen("expr", max_tokens=8, stop="\n")
    size = len(s["expr"].strip())  # a graph break: Python needs the generated text
    s += f"\nLength {size}\nAnswer:" + sgl.gen("answer", max_tokens=4)


# ----- helpers -----


class RecordingBackend(ScriptedBackend):
    """ScriptedBackend that also records each call's (kind, hint) and every end_program."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.hints: list[tuple[str, str, ProgramHint | None]] = []  # (kind, prompt text, hint), in call order
        self.ended: list[str] = []

    def _enter(self, kind, prompt):
        super()._enter(kind, prompt)
        with self._lock:
            self.hints.append((kind, prompt.text, prompt.hint))

    def end_program(self, program_id: str) -> int:
        with self._lock:
            self.ended.append(program_id)
        return 0

    def next_uses(self, kind: str = "") -> list[int]:
        return [h.next_use for k, _, h in self.hints if h is not None and (not kind or k == kind)]

    def ids(self) -> list[str]:
        return [h.program_id for _, _, h in self.hints if h is not None]


def static(fn, **compile_kwargs) -> dict[str, list[NextUse]]:
    """Each call's NextUse by its variable name (a cache_prefix by its scope), graph order."""
    plan = ExecutionPlan(fn.compile(**compile_kwargs).graph)
    out: dict[str, list[NextUse]] = {}
    for i, nu in plan.next_uses.items():
        node = plan.nodes[i]
        key = node.attrs["name"] if node.op is not Op.CACHE_PREFIX else f"cache_prefix:{node.attrs['scope']}"
        out.setdefault(key, []).append(nu)
    return out


def bases(fn, **compile_kwargs) -> dict[str, list[int]]:
    return {k: [nu.base for nu in v] for k, v in static(fn, **compile_kwargs).items()}


# ----- next_use read off the graph -----


def test_a_chain_reuses_each_gen_at_once_and_the_last_never():
    """gen -> text -> gen: the first gen's text is extended by the next call at once (0); the last by none."""
    assert bases(chain) == {"think": [0], "answer": [NEVER]}


def test_tree_of_thought_forks_reuse_the_parent_at_once_and_the_children_never():
    """A gen before a fork: its text is extended first by the fork hint of the hoisted prefix (0), whose
    text the children extend at once (0); the children's ideas and the final gen are extended by nothing."""
    assert bases(tree_of_thought) == {"plan": [0], "cache_prefix:fork": [0], "idea": [NEVER] * 3, "best": [NEVER]}


def test_without_passes_the_children_extend_the_gen_before_the_fork():
    """No prefix hoisting, no fork hint: the fork's children extend the plan's text right away (0), not the
    gen after the join (which waits for the three ideas)."""
    assert bases(tree_of_thought, passes=[]) == {"plan": [0], "idea": [NEVER] * 3, "best": [NEVER]}


def test_a_select_followed_by_a_gen_is_reused_at_once():
    """A select's final text (prompt + choice) is the next gen's prompt prefix: 0."""
    assert bases(select_then_gen) == {"kind": [0], "why": [NEVER]}


def test_a_gen_in_a_loop_is_reused_by_the_next_iteration_only_while_one_is_left():
    """A loop body's last gen is extended by the next iteration (0) while the loop has another item, and by
    nothing after its last one when no call follows the loop; with a gen after the loop, always 0."""
    [a] = static(loop_only)["a"]
    assert a.base == NEVER and [d for d, _ in a.wraps] == [0]
    assert a.value(lambda loop: True) == 0 and a.value(lambda loop: False) == NEVER
    assert bases(loop_then_gen) == {"a": [0], "z": [NEVER]}


def test_a_branch_counts_only_calls_that_can_run_with_the_call():
    """The select is extended by either case's first gen (0); a case's gen by the gen after it in the same case
    (0), never by the other case's; the gen after the branch (duplicated per case) by nothing."""
    assert bases(branch_on_select) == {"kind": [0], "m": [0], "c": [0], "d": [NEVER, NEVER]}


def test_multi_turn_chat_reuses_the_first_answer_for_the_second_turn():
    """The first assistant answer is the prefix of the second turn's prompt: 0; the last answer: NEVER."""
    assert bases(multi_turn) == {"a1": [0], "a2": [NEVER]}


def test_a_called_program_starts_empty_and_its_calls_are_counted_as_distance():
    """A called program's stream does not extend the caller's text; the caller's next gen waits for the
    called program's two gens (it reads y), so the caller's first gen is reused after 2 calls."""
    uses = bases(calls_helper)
    assert uses["first"] == [2] and uses["second"] == [NEVER]
    assert uses["x"] == [0] and uses["y"] == [NEVER]


def test_next_use_is_computed_once_per_plan():
    """The plan caches its hints: asking twice gives the same object."""
    plan = ExecutionPlan(chain.compile().graph)
    assert plan.next_uses is plan.next_uses


# ----- what runs send -----


def test_each_run_sends_the_static_next_use_with_a_fresh_program_id_ended_once():
    """Every call of a run carries the run's id and its next_use; three runs use three ids, each ended once,
    after its calls."""
    prog = chain.compile()
    backend = RecordingBackend()
    for q in ("a", "b", "c"):
        prog.run(q=q, backend=backend)
    assert backend.next_uses() == [0, NEVER] * 3
    ids = backend.ids()
    assert len(set(ids)) == 3 and ids[0] == ids[1] and ids[2] == ids[3]
    assert Counter(backend.ended) == Counter(set(ids)) and backend.ended == list(dict.fromkeys(ids))


def test_a_loop_run_sends_zero_until_the_last_iteration():
    """Three items: the gens of the first two iterations are reused by the next (0), the last is not."""
    backend = RecordingBackend()
    loop_only.compile().run(items=["x", "y", "z"], backend=backend)
    assert backend.next_uses("gen") == [0, 0, NEVER]


def test_a_branch_run_sends_the_taken_case_hints():
    """select (0), the taken case's gen (0), the gen after the branch (NEVER)."""
    backend = RecordingBackend()
    branch_on_select.compile().run(q="2+2?", backend=backend)
    assert backend.next_uses() == [0, 0, NEVER]


def test_fork_children_calls_and_fork_hint_share_the_run_id():
    """Every call of a forking run (children, fork hint, batch of one) carries the same id."""
    backend = RecordingBackend()
    tree_of_thought.compile().run(q="why?", backend=backend)
    assert len(set(backend.ids())) == 1 and len(backend.hints) == 6
    assert sorted(backend.next_uses()) == [NEVER] * 4 + [0, 0]
    assert backend.ended == backend.ids()[:1]


def test_a_program_with_a_graph_break_shares_one_id_and_reuses_the_segment_end():
    """The last call before a graph break is extended by the next segment (0, the segment has no other call
    still running); both segments' calls share one id, ended once."""
    prog = with_break.compile()
    assert prog.breaks
    backend = RecordingBackend()
    state = prog.run(question="six times seven", backend=backend)
    assert state.error() is None
    assert backend.next_uses("gen") == [0, NEVER]
    assert len(set(backend.ids())) == 1 and backend.ended == backend.ids()[:1]


def test_a_break_segment_is_planned_as_continued():
    """The same graph planned as a continued segment reuses stream 0's last call (0) instead of NEVER."""
    graph = chain.compile().graph
    assert [nu.base for nu in ExecutionPlan(graph).next_uses.values()] == [0, NEVER]
    assert [nu.base for nu in ExecutionPlan(graph, continues=True).next_uses.values()] == [0, 0]


def test_a_failing_run_and_a_timed_out_run_still_end_their_program():
    """A run whose gen fails, and one that times out while its gen hangs, each call end_program once."""
    def fail(prompt, params):
        raise RuntimeError("model exploded")

    backend = RecordingBackend(reply=fail)
    result = GraphExecutor(chain.compile().graph, backend).run({"q": "x"})
    assert result.error is not None and backend.ended == backend.ids()[:1]

    release = threading.Event()
    hanging = RecordingBackend(on_call=lambda kind, prompt: release.wait(10))
    executor = GraphExecutor(chain.compile().graph, hanging, timeout=0.2)
    try:
        result = executor.run({"q": "x"})
        assert "timeout" in result.error and hanging.ended == hanging.ids()[:1]
    finally:
        release.set()
        executor.close()


def test_a_run_that_makes_no_call_ends_nothing():
    """An empty loop makes no call: no hint was sent, so no end_program either."""
    backend = RecordingBackend()
    loop_only.compile().run(items=[], backend=backend)
    assert backend.hints == [] and backend.ended == []


def test_run_batch_gives_each_input_its_id_and_the_batch_prefix_its_own():
    """Four inputs: four ids, each ended once; the batch prefix hint (sent once, next_use 0) has a fifth id,
    ended after the batch."""
    backend = RecordingBackend()
    states = chain.compile().run_batch([{"q": str(i)} for i in range(4)], backend=backend, num_threads=2)
    assert all(s.error() is None for s in states)
    batch = [h for k, t, h in backend.hints if k == "cache_prefix"]
    assert len(batch) == 1 and batch[0].next_use == 0 and ".batch:" in batch[0].program_id
    run_ids = {h.program_id for k, _, h in backend.hints if k == "gen"}
    assert len(run_ids) == 4 and batch[0].program_id not in run_ids
    assert Counter(backend.ended) == Counter(run_ids | {batch[0].program_id})
    assert backend.ended[-1] == batch[0].program_id


def test_program_hints_off_sends_no_hint_and_no_end():
    """program_hints=False on run, run_batch, a graph-break program and the executor: no hint, no end_program."""
    backend = RecordingBackend()
    chain.compile().run(q="x", backend=backend, program_hints=False)
    chain.compile().run_batch([{"q": "a"}, {"q": "b"}], backend=backend, program_hints=False)
    with_break.compile().run(question="q", backend=backend, program_hints=False)
    GraphExecutor(tree_of_thought.compile().graph, backend, program_hints=False).run({"q": "x"})
    chain.run(q="eager", backend=backend, program_hints=False)  # eager: accepted, never any hints
    assert len(backend.hints) > 10
    assert all(h is None for _, _, h in backend.hints) and backend.ended == []


def test_eager_runs_send_no_hints():
    """An eager run cannot see the program's future: no hint, no end_program."""
    backend = RecordingBackend()
    tree_of_thought.run(q="x", backend=backend)
    assert backend.hints and all(h is None for _, _, h in backend.hints) and backend.ended == []


def test_the_cli_switch_turns_hints_off(tmp_path, monkeypatch, capsys):
    """`sglc run --program-hints off` sends none; the default (on) sends them and ends each input's program."""
    import sglc.cli_run as cli_run
    from sglc.cli import main

    graph = tmp_path / "chain.pb"
    chain.compile().save(graph)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"q": "a"}\n{"q": "b"}\n')
    for flag, hinted in ((["--program-hints", "off"], False), ([], True)):
        backend = RecordingBackend()
        monkeypatch.setattr(cli_run, "_make_backend", lambda args, backend=backend: backend)
        code = main(["run", str(graph), "--input", str(inputs), "--output", str(tmp_path / "o.jsonl"),
                     "--no-progress", *flag])
        assert code == 0, capsys.readouterr().err
        kinds = [h is not None for k, _, h in backend.hints if k == "gen"]
        assert kinds == [hinted] * 4
        assert len(backend.ended) == (3 if hinted else 0)  # two inputs and the batch prefix


# ----- clients -----


def test_grpc_requests_carry_the_prompt_hint():
    """Generate, Score and CachePrefix requests get `hint` from the prompt; none without one."""
    hint = ProgramHint("prog:1", 3, 500)
    prompt = Prompt("hello", hint=hint)
    requests = [client_convert.generate_request(prompt, GenParams(max_new_tokens=2)),
                client_convert.score_request(prompt, ["a", "b"]),
                client_convert.cache_prefix_request(prompt)]
    for request in requests:
        assert request.HasField("hint") and ProgramHint.from_pb(request.hint) == hint
    assert not client_convert.generate_request(Prompt("hello"), GenParams()).HasField("hint")
    assert not client_convert.score_request(Prompt("hello"), ["a"]).HasField("hint")


def test_srt_end_program_is_zero_for_a_dead_or_older_server():
    """No server: 0 (never raises). A server without the EndProgram rpc (UNIMPLEMENTED): 0, asked once only."""
    from concurrent import futures

    from sglc.executor.backends.srt import SrtBackend
    from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

    dead = SrtBackend("127.0.0.1:1", info_timeout=2.0)
    try:
        assert dead.end_program("prog:1") == 0
    finally:
        dead.close()

    calls: list[str] = []

    class Older(pb_grpc.RuntimeServicer):  # every rpc the generated base answers UNIMPLEMENTED
        def EndProgram(self, request, context):
            calls.append(request.program_id)
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no EndProgram here")

    server = grpc.server(futures.ThreadPoolExecutor(2))
    pb_grpc.add_RuntimeServicer_to_server(Older(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    backend = SrtBackend(f"127.0.0.1:{port}")
    try:
        assert backend.end_program("prog:1") == 0 and backend.end_program("prog:2") == 0
        assert calls == ["prog:1"]
    finally:
        backend.close()
        server.stop(0)


@pytest.mark.parametrize("hint", [ProgramHint("p"), ProgramHint("run:7.a-b_c", NEVER, 1500), ProgramHint("x" * 128, 1 << 20)])
def test_a_hint_round_trips_through_a_request_id(hint):
    """How a hint passes sglang-router: ``to_rid`` / ``from_rid``; other ids carry none."""
    rid = hint.to_rid("0123abcdef")
    assert rid.startswith("sglc-ph/") and ProgramHint.from_rid(rid) == hint
    for other in (None, 7, "", "req-1", "sglc-p/0/0/n/p"):
        assert ProgramHint.from_rid(other) is None
    with pytest.raises(ValueError, match="nonce"):
        hint.to_rid("not/a nonce")
    with pytest.raises(ValueError, match="rid"):
        ProgramHint.from_rid("sglc-ph/0/0/p")


def test_sglang_http_body_carries_the_hint_only_for_an_sglc_server():
    """`program_hint` (ProgramHint.to_json) goes on /generate to one sglc server, in the rid behind a router
    of sglc workers, never to others; end_program on a server that is not sglc, or unreachable, is 0."""
    from sglc.executor.backends.sglang_http import SGLangBackend

    backend = SGLangBackend("http://127.0.0.1:1", info_timeout=1.0, retry=False)
    try:
        prompt = Prompt("hi", hint=ProgramHint("prog:1", 2))
        backend._is_sglc = True
        assert backend._body(prompt, {})["program_hint"] == {"program_id": "prog:1", "next_use": 2}
        assert "program_hint" not in backend._body(Prompt("hi"), {})
        assert backend.end_program("prog:1") == 0  # nothing listens: 0, no exception
        backend._is_sglc = False
        assert "program_hint" not in backend._body(prompt, {}) and "rid" not in backend._body(prompt, {})
        assert backend.end_program("prog:1") == 0
        json.dumps(backend._body(prompt, {}))
        backend._sglc_workers = ("http://127.0.0.1:1",)  # behind a router with sglc workers: the rid carries it
        body = backend._body(prompt, {})
        assert "program_hint" not in body and ProgramHint.from_rid(body["rid"]) == prompt.hint
        assert body["rid"] != backend._body(prompt, {})["rid"]  # unique per request
        assert "rid" not in backend._body(Prompt("hi"), {})
        assert backend.end_program("prog:1") == 0  # the worker does not answer: 0
    finally:
        backend.close()


# ----- round trip on the real runtime (gRPC and SGLang-wire HTTP, served in-process) -----

runtime = runtime_fixture(4096, http_port=0)


@pytest.fixture
def engine_spy(runtime, monkeypatch):
    """The hint of every Engine.submit / score_job and the id of every Engine.end_program from now on."""
    seen: dict[str, list] = {"hints": [], "ended": []}
    engine = runtime.engine
    real_submit, real_score, real_end = engine.submit, engine.score_job, engine.end_program

    def submit(*args, **kwargs):
        seen["hints"].append(kwargs.get("hint"))
        return real_submit(*args, **kwargs)

    def score_job(*args, **kwargs):
        seen["hints"].append(kwargs.get("hint"))
        return real_score(*args, **kwargs)

    def end_program(program_id):
        seen["ended"].append(program_id)
        return real_end(program_id)

    monkeypatch.setattr(engine, "submit", submit)
    monkeypatch.setattr(engine, "score_job", score_job)
    monkeypatch.setattr(engine, "end_program", end_program)
    return seen


@pytest.mark.model
@pytest.mark.parametrize("wire", ["grpc", "http"])
def test_hints_reach_the_engine_and_the_run_ends_there(runtime, engine_spy, wire):
    """A compiled select-then-gen run over srt (gRPC) and the SGLang-wire backend (HTTP): the engine gets each
    call's hint with the run's id (select 0, gen NEVER), EndProgram reaches it once, and the greedy result is
    the one without hints."""
    from sglc.executor.backends.sglang_http import SGLangBackend
    from sglc.executor.backends.srt import SrtBackend

    http = [f for f in runtime.frontends if f.kind == "http"][0].address
    backend = SrtBackend(runtime.frontends[0].address) if wire == "grpc" else SGLangBackend(f"http://{http}")
    prog = select_then_gen.compile()
    try:
        hinted = prog.run(q="2+2=", backend=backend, temperature=0, max_new_tokens=3)
        hints = [h for h in engine_spy["hints"] if h is not None]
        assert {h.program_id for h in hints} == set(engine_spy["ended"]) and len(engine_spy["ended"]) == 1
        assert hints[0].next_use == 0 and hints[-1].next_use == NEVER
        engine_spy["hints"].clear()
        plain = prog.run(q="2+2=", backend=backend, temperature=0, max_new_tokens=3, program_hints=False)
        assert all(h is None for h in engine_spy["hints"]) and len(engine_spy["ended"]) == 1
        assert plain.variables() == hinted.variables()
    finally:
        backend.close()
