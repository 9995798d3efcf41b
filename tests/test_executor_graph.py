"""Graph executor semantics and scheduling, on a deterministic scripted backend (see
test_executor_support.py: a test double for the executor's own logic; model behaviour is tested
against the real engine elsewhere)."""
from __future__ import annotations

import threading

import pytest
from test_executor_support import ScriptedBackend

import sglc as sgl
from sglc.executor.graph_executor import GraphExecutor
from sglc.executor.results import ProgramResult
from sglc.executor.stream_state import IMAGE_MARKER

WAIT = 20.0  # seconds a test's rendezvous may take before it counts as a deadlock (never hit when correct)


def run_graph(prog, backend, passes=None, max_parallel=16, timeout=None, **arguments) -> ProgramResult:
    graph = prog.compile(passes=passes).graph
    executor = GraphExecutor(graph, backend, max_parallel=max_parallel, timeout=timeout)
    try:
        return executor.run(arguments)
    finally:
        executor.close()


def rendezvous(parties: int, match) -> callable:
    """on_call hook: calls whose prompt satisfies `match` wait until `parties` of them are in flight."""
    barrier = threading.Barrier(parties, timeout=WAIT)

    def hook(kind, prompt):
        if kind == "gen" and match(prompt.text):
            barrier.wait()

    return hook


@sgl.function
def two_branches(s, topic):
    s += "Topic: " + topic + "\n"
    forks = s.fork(2)
    for i, f in enumerate(forks):
        f += f"branch {i}:" + sgl.gen("idea", max_tokens=4)
    forks.join()
    s += "Ideas: " + forks[0]["idea"] + " / " + forks[1]["idea"]


def test_fork_branches_run_concurrently():
    """Both children's gens are in flight at the same time (a barrier of 2 would break otherwise)."""
    backend = ScriptedBackend(on_call=rendezvous(2, lambda t: "branch" in t))
    result = run_graph(two_branches, backend, topic="tea")
    assert result.error is None
    assert backend.max_in_flight >= 2


def test_parent_continues_after_a_fork_without_waiting_for_its_children():
    """Stream 0's gen after the fork runs while the children's gens are still running (until the join)."""
    @sgl.function
    def prog(s):
        s += "Q"
        forks = s.fork(2)
        for f in forks:
            f += " child" + sgl.gen("c", max_tokens=2)
        s += " parent" + sgl.gen("p", max_tokens=2)
        forks.join()

    barrier = threading.Barrier(3, timeout=WAIT)
    backend = ScriptedBackend(on_call=lambda kind, prompt: barrier.wait() if kind == "gen" else None)
    result = run_graph(prog, backend)
    assert result.error is None
    assert backend.max_in_flight == 3


def test_a_branch_waits_only_on_its_select_not_on_unrelated_streams():
    """The guarded gen after a BRANCH starts while a sibling stream's gen is still blocked on it."""
    @sgl.function
    def prog(s):
        s += "Start."
        forks = s.fork(2)
        for f in forks:
            f += " child" + sgl.gen("c", max_tokens=2)
        s += " Pick: " + sgl.select("choice", choices=["left", "right"])
        if s["choice"] == "left":
            s += " L:" + sgl.gen("after", max_tokens=2)
        else:
            s += " R:" + sgl.gen("after", max_tokens=2)
        forks.join()

    after_started = threading.Event()

    def hook(kind, prompt):
        if kind != "gen":
            return
        if prompt.text.endswith((" L:", " R:")):
            after_started.set()
        elif not after_started.wait(WAIT):
            raise RuntimeError("the guarded gen never started while a child was running")

    result = run_graph(prog, ScriptedBackend(on_call=hook))
    assert result.error is None
    assert result.variables["choice"] in ("left", "right")


def test_max_parallel_bounds_the_model_calls_in_flight_per_program():
    """max_parallel=1 runs one call at a time; max_parallel=4 lets a 4-way fork overlap fully."""
    @sgl.function
    def prog(s):
        s += "Go"
        forks = s.fork(4)
        for i, f in enumerate(forks):
            f += f" item {i}:" + sgl.gen("x", max_tokens=2)
        forks.join()

    serial = ScriptedBackend()
    assert run_graph(prog, serial, max_parallel=1).error is None
    assert serial.max_in_flight == 1
    parallel = ScriptedBackend(on_call=rendezvous(4, lambda t: "item" in t))
    assert run_graph(prog, parallel, max_parallel=4).error is None
    assert parallel.max_in_flight == 4


def test_skipped_case_makes_no_calls_and_appends_no_text():
    """Only the taken case's nodes run: the other case's gen is never called and its text is absent."""
    @sgl.function
    def prog(s):
        s += "Is it raining? " + sgl.select("rain", choices=["yes", "no"])
        if s["rain"] == "yes":
            s += " Take an umbrella because" + sgl.gen("why_yes", max_tokens=3)
        else:
            s += " Wear sunglasses because" + sgl.gen("why_no", max_tokens=3)

    prefer_no = ScriptedBackend(scores=lambda prompt, c: [-0.1] if c == "no" else [-5.0])
    result = run_graph(prog, prefer_no)
    assert result.error is None
    assert result.variables["rain"] == "no" and "why_no" in result.variables and "why_yes" not in result.variables
    assert "umbrella" not in result.text and result.text.startswith("Is it raining? no Wear sunglasses because")
    assert [k for k in prefer_no.kinds() if k == "gen"] == ["gen"]


def test_streams_of_a_skipped_fork_never_run():
    """A fork inside the case not taken creates no streams: none of its children's calls happen."""
    @sgl.function
    def prog(s):
        s += "Mode: " + sgl.select("mode", choices=["fan", "single"])
        if s["mode"] == "fan":
            forks = s.fork(3)
            for f in forks:
                f += " fan:" + sgl.gen("part", max_tokens=2)
            forks.join()
        else:
            s += " one:" + sgl.gen("whole", max_tokens=2)

    backend = ScriptedBackend(scores=lambda prompt, c: [-0.1] if c == "single" else [-5.0])
    result = run_graph(prog, backend)
    assert result.error is None and "whole" in result.variables and "part" not in result.variables
    assert not any("fan:" in text for _, text in backend.calls)


def test_fork_hint_prefills_the_parent_text_before_any_child_call():
    """With the default passes, a cache_prefix call of the shared text precedes every child's gen."""
    backend = ScriptedBackend()
    result = run_graph(two_branches, backend, topic="rivers")
    assert result.error is None
    kinds = backend.kinds()
    hint = kinds.index("cache_prefix")
    child_gens = [i for i, (k, t) in enumerate(backend.calls) if k == "gen" and "branch" in t]
    assert len(child_gens) == 2 and all(hint < i for i in child_gens)
    hinted = backend.calls[hint][1]
    assert all(backend.calls[i][1].startswith(hinted) for i in child_gens)
    assert hinted.startswith("Topic: rivers\n")


def test_join_gathers_child_variables_as_lists_in_child_order():
    """gather_variable: parent[name] == [child 0's value, child 1's value]."""
    backend = ScriptedBackend()
    result = run_graph(two_branches, backend, topic="tea")
    ideas = result.variables["idea"]
    assert isinstance(ideas, list) and len(ideas) == 2
    assert result.text.endswith("Ideas: " + ideas[0] + " / " + ideas[1])


def test_concate_and_append_appends_each_childs_new_text_in_order():
    """concate_and_append: the parent's text gains child 0's new text, then child 1's."""
    @sgl.function
    def prog(s):
        s += "Root."
        forks = s.fork(2)
        forks[0] += " first" + sgl.gen("a", max_tokens=2)
        forks[1] += " second" + sgl.gen("b", max_tokens=2)
        forks.join(mode="concate_and_append")
        s += " End."

    result = run_graph(prog, ScriptedBackend(), passes=[])
    assert result.error is None
    assert "a" not in result.variables  # concatenation gathers text, not variables
    first = result.text.index(" first")
    assert result.text.startswith("Root. first") and result.text.index(" second") > first
    assert result.text.endswith(" End.")


def test_variables_are_read_across_streams():
    """A child reads the parent's gen; the parent reads a child's gen (VARIABLE nodes)."""
    @sgl.function
    def prog(s):
        s += "Name:" + sgl.gen("name", max_tokens=2)
        forks = s.fork(1)
        forks[0] += " Hello" + forks[0]["name"] + "!" + sgl.gen("greeting", max_tokens=2)
        s += " Child said" + forks[0]["greeting"]
        forks.join()

    result = run_graph(prog, ScriptedBackend(), passes=[])
    assert result.error is None
    name, greeting = result.variables["name"], result.variables["greeting"][0]
    assert result.text == "Name:" + name + " Child said" + greeting


def test_roles_render_the_chat_template_and_build_messages():
    """ROLE_BEGIN/END add the template's text around the content; messages hold the content."""
    @sgl.function
    def prog(s, q):
        s += sgl.system("Be brief.")
        s += sgl.user(q)
        s += sgl.assistant(sgl.gen("a", max_tokens=2))

    result = run_graph(prog, ScriptedBackend(), q="Hi?")
    a = result.variables["a"]
    assert result.text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
                           "<|im_start|>assistant\n" + a + "<|im_end|>\n")
    assert result.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
                               {"role": "assistant", "content": a}]


def test_typed_gen_stores_the_generated_string():
    """gen(dtype=int) stores the digits as a str (SGLang), so `"So " + s["n"]` appends them."""
    @sgl.function
    def prog(s):
        s += "Number: " + sgl.gen("n", dtype=int, max_tokens=3)
        s += " So " + s["n"] + "."

    result = run_graph(prog, ScriptedBackend())
    n = result.variables["n"]
    assert isinstance(n, str) and n.isdigit()
    assert result.text == f"Number: {n} So {n}."


def test_gen_sampling_defaults_follow_sglang_and_gen_attrs_win():
    """Unset gen parameters get SGLang's defaults (128 tokens, temperature 1.0); set ones are kept."""
    @sgl.function
    def prog(s):
        s += "A" + sgl.gen("a")
        s += "B" + sgl.gen("b", max_tokens=5, temperature=0, stop="\n")

    backend = ScriptedBackend()
    assert run_graph(prog, backend).error is None
    first, second = backend.params
    assert (first.max_new_tokens, first.temperature) == (128, 1.0)
    assert (second.max_new_tokens, second.temperature, second.stop) == (5, 0.0, ["\n"])


def test_a_failing_node_is_named_with_its_source_line():
    """The error says which node failed, its op and the user's file:line, and keeps earlier variables."""
    @sgl.function
    def prog(s):
        s += "ok:" + sgl.gen("first", max_tokens=2)
        s += "bad:" + sgl.gen("second", max_tokens=2)  # the failing line

    def hook(kind, prompt):
        if prompt.text.endswith("bad:"):
            raise ConnectionError("runtime went away")

    result = run_graph(prog, ScriptedBackend(on_call=hook))
    line = prog.func.__code__.co_firstlineno + 3
    assert result.error == (f"while executing %second (gen) at test_executor_graph.py:{line}: "
                            "ConnectionError: runtime went away")
    assert "first" in result.variables


def test_missing_or_unknown_arguments_fail_the_input_with_a_clear_reason():
    """A missing argument names the argument node; an unknown one lists the program's parameters."""
    @sgl.function
    def prog(s, q, style="short"):
        s += q + style

    backend = ScriptedBackend()
    assert run_graph(prog, backend, q="x").text == "xshort"
    missing = run_graph(prog, backend)
    assert "%q (argument)" in missing.error and "missing argument 'q'" in missing.error
    unknown = run_graph(prog, backend, q="x", colour="red")
    assert unknown.error == "unknown argument(s) colour; the program takes q, style"


def test_program_timeout_fails_the_run_and_names_the_waiting_node():
    """A backend call that never answers fails the input after the program timeout (no hang)."""
    release = threading.Event()

    @sgl.function
    def prog(s):
        s += "wait:" + sgl.gen("stuck", max_tokens=2)

    backend = ScriptedBackend(on_call=lambda kind, prompt: release.wait(WAIT))
    try:
        result = run_graph(prog, backend, timeout=0.3)
    finally:
        release.set()
    assert result.error.startswith("while executing %stuck (gen) at ")
    assert "no result within the program timeout of 0.3 s" in result.error


def test_hoisted_fork_passes_gathered_variables_through_to_stream_0():
    """After prefix hoisting (a one-way fork around the real one), results still show the lists."""
    @sgl.function
    def prog(s):
        s += "Story."
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += " Continue the story, version " + str(i) + ":" + sgl.gen("cont", max_tokens=2)
        forks.join()

    compiled = prog.compile()
    assert any(n.attrs.get("hoisted") for n in compiled.graph.nodes), "the default passes hoist the shared text"
    result = run_graph(prog, ScriptedBackend())
    plain = run_graph(prog, ScriptedBackend(), passes=[])
    assert result.error is None
    assert result.variables == plain.variables and len(result.variables["cont"]) == 3
    assert result.text == plain.text


def test_images_are_recorded_in_messages_and_a_missing_file_is_an_error(tmp_path):
    """IMAGE puts the runtime's marker in the text and the path in the prompt's media and message
    content; a missing file fails clearly."""
    from sglc.wire.prompt import IMAGE_MARKER as RUNTIME_MARKER

    assert IMAGE_MARKER == RUNTIME_MARKER
    @sgl.function
    def prog(s, path):
        s += sgl.user(sgl.image(path) + "Describe it.")

    picture = tmp_path / "p.png"
    picture.write_bytes(b"\x89PNG")
    result = run_graph(prog, ScriptedBackend(supports_images=True), path=str(picture))
    assert result.text == "<|im_start|>user\n" + IMAGE_MARKER + "Describe it.<|im_end|>\n"
    assert result.messages[0]["content"] == [{"type": "image_url", "image_url": {"url": str(picture)}},
                                             {"type": "text", "text": "Describe it."}]
    missing = run_graph(prog, ScriptedBackend(), path=str(tmp_path / "nope.png"))
    assert "(image)" in missing.error and "not found" in missing.error


@pytest.mark.parametrize("method", ["token_length_normalized", "greedy_token_selection",
                                    "unconditional_likelihood_normalized"])
def test_select_uses_its_choices_method(method):
    """Each method picks per select_methods on the backend's logprobs (here designed to disagree)."""
    table = {"ab": [-1.0, -1.0], "a": [-1.2], "b": [-0.5, -3.0]}
    alone = {"ab": [-0.5, -0.5], "a": [-2.0], "b": [-2.0, -2.0]}  # the choices without the prompt

    @sgl.function
    def prog(s):
        s += "Pick:" + sgl.select("x", choices=["ab", "a", "b"], choices_method=method)

    def scores(prompt, c):
        return table[c] if prompt.text else alone[c]

    result = run_graph(prog, ScriptedBackend(scores=scores))
    expected = {"token_length_normalized": "ab", "greedy_token_selection": "b",
                "unconditional_likelihood_normalized": "a"}[method]
    assert result.variables["x"] == expected


def test_an_empty_program_finishes_with_an_empty_result():
    """A program with no primitives completes at once (no waiting on nodes that do not exist)."""
    @sgl.function
    def nothing(s):
        pass

    result = run_graph(nothing, ScriptedBackend(), passes=[], timeout=30)
    assert result.error is None and result.text == "" and result.variables == {} and result.calls == []
