"""Hand-built IR graphs for the IR, serialization, printing and pass tests (no tracer needed)."""
from __future__ import annotations

from sglc.ir import Graph, Guard, Node, Op, ValueType


def src(line: int) -> dict[str, str]:
    return {"source": f"essay_judge.py:{line}"}


def linear_graph() -> Graph:
    """argument -> text -> append -> gen -> variable, all in stream 0."""
    g = Graph("linear")
    topic = g.create_node(Op.ARGUMENT, attrs={"name": "topic"}, meta=src(1))
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Write about "}, meta=src(2))
    g.create_node(Op.APPEND, [topic], meta=src(2))
    gen = g.create_node(Op.GEN, attrs={"name": "essay", "max_new_tokens": 64, "stop": "\n"}, meta=src(3))
    g.create_node(Op.VARIABLE, [gen], attrs={"name": "essay"}, meta=src(4))
    return g


def every_op_graph() -> Graph:
    """The essay judge in IR form, touching every op and every attribute kind."""
    g = Graph("essay_judge")
    g.meta.update({"num_api_spec_tokens": None, "arg_names": ["image_path", "essay"], "source_file": "essay_judge.py"})
    image_path = g.create_node(Op.ARGUMENT, attrs={"name": "image_path"}, meta=src(10))
    essay = g.create_node(Op.ARGUMENT, attrs={"name": "essay", "default": ""}, type=ValueType.STR, meta=src(10))

    def role(name: str, *parts: Node | str, guard: Guard | None = None, stream: int = 0) -> list[Node]:
        made = [g.create_node(Op.ROLE_BEGIN, attrs={"role": name}, stream=stream, guard=guard, meta=src(11))]
        for part in parts:
            if isinstance(part, str):
                made.append(g.create_node(Op.CONSTANT_TEXT, attrs={"text": part}, stream=stream, guard=guard, meta=src(11)))
            else:
                made.append(part)
        made.append(g.create_node(Op.ROLE_END, attrs={"role": name}, stream=stream, guard=guard, meta=src(11)))
        return made

    role("system", "Evaluate an essay about an image.")
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "user"}, meta=src(12))
    g.create_node(Op.IMAGE, [image_path], meta=src(12))
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Essay:"}, meta=src(12))
    g.create_node(Op.APPEND, [essay], meta=src(12))
    g.create_node(Op.ROLE_END, attrs={"role": "user"}, meta=src(12))
    role("assistant", "Sure!")
    role("user", "Is the essay related to the image?")
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "assistant"}, meta=src(15))
    related = g.create_node(
        Op.SELECT,
        attrs={"name": "related", "choices": ["yes", "no"], "temperature": 0.0, "choices_method": "token_length_normalized"},
        meta=src(15),
    )
    g.create_node(Op.ROLE_END, attrs={"role": "assistant"}, meta=src(15))
    branch = g.create_node(Op.BRANCH, [related], attrs={"cases": ["yes", "no"]}, meta=src(16))
    yes, no = Guard(branch, 0), Guard(branch, 1)
    g.create_node(Op.CACHE_PREFIX, guard=yes, meta=src(18))
    fork = g.create_node(Op.FORK, attrs={"n": 3}, guard=yes, meta=src(18))
    lasts = []
    for i, dim in enumerate(["clarity", "originality", "evidence"]):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": i}, stream=stream, guard=yes, meta=src(19))
        role("user", f"Evaluate based on the following dimension: {dim}.", guard=yes, stream=stream)
        g.create_node(Op.ROLE_BEGIN, attrs={"role": "assistant"}, stream=stream, guard=yes, meta=src(21))
        g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Judgment:"}, stream=stream, guard=yes, meta=src(21))
        g.create_node(
            Op.GEN,
            attrs={"name": "judgment", "max_new_tokens": 256, "stop": ["END", "\n\n"], "temperature": 0.7, "top_p": 0.9,
                   "top_k": -1, "min_p": 0.0, "frequency_penalty": -0.5, "presence_penalty": 1.5,
                   "ignore_eos": False, "stop_token_ids": [2, 7]},
            stream=stream, guard=yes, meta=src(21),
        )
        lasts.append(g.create_node(Op.ROLE_END, attrs={"role": "assistant"}, stream=stream, guard=yes, meta=src(21)))
    join = g.create_node(
        Op.JOIN, [fork, *lasts], attrs={"mode": "gather_variable", "variables": ["judgment"]}, guard=yes, meta=src(23)
    )
    g.create_node(Op.VARIABLE, [join], attrs={"name": "judgment"}, type=ValueType.LIST, guard=yes, meta=src(23))
    first_judgment = g.stream_nodes(1)[-2]
    judgment = g.create_node(Op.VARIABLE, [first_judgment], attrs={"name": "judgment"}, guard=yes, meta=src(24))
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "user"}, guard=yes, meta=src(25))
    g.create_node(Op.VAR_SCOPE_BEGIN, attrs={"name": "request"}, guard=yes, meta=src(25))
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Provide the verdict for: "}, guard=yes, meta=src(25))
    g.create_node(Op.APPEND, [judgment], guard=yes, meta=src(25))
    g.create_node(Op.VAR_SCOPE_END, attrs={"name": "request"}, guard=yes, meta=src(25))
    g.create_node(Op.VIDEO, attrs={"path": "clip.mp4", "num_frames": 4}, guard=yes, meta=src(26))
    g.create_node(Op.ROLE_END, attrs={"role": "user"}, guard=yes, meta=src(26))
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "assistant"}, guard=yes, meta=src(27))
    g.create_node(
        Op.GEN,
        attrs={"name": "verdict", "max_new_tokens": 32, "regex": r"Score: \d+\.\d+; Verdict: (Pass|Fail)",
               "json_schema": {"type": "object", "properties": {"score": {"type": "number"}}}},
        guard=yes, meta=src(27),
    )
    score = g.create_node(Op.GEN, attrs={"name": "score", "dtype": "int", "max_new_tokens": 4}, type=ValueType.INT,
                          guard=yes, meta=src(28))
    g.create_node(Op.ROLE_END, attrs={"role": "assistant"}, guard=yes, meta=src(28))
    g.create_node(Op.VARIABLE, [score], attrs={"name": "score"}, type=ValueType.INT, guard=yes, meta=src(29))
    g.create_node(Op.STREAM_TEXT, guard=yes, meta=src(29))
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "The essay is unrelated."}, guard=no, meta=src(17))
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Bye."}, guard=no, meta=src(17))
    length = g.create_node(Op.LENGTH, [essay], guard=no, meta=src(17))
    begin = g.create_node(Op.LOOP_BEGIN, [essay], guard=no, meta=src(17), attrs={"empty_error": "no essay"})
    index = g.create_node(Op.LOOP_INDEX, [begin], attrs={"start": 1}, guard=no, meta=src(17))
    first = g.create_node(Op.GET_ITEM, [essay], attrs={"key": 0}, guard=no, meta=src(17))
    same = g.create_node(Op.GET_ITEM, [essay, index], guard=no, meta=src(17))
    g.create_node(Op.APPEND, [g.create_node(Op.FORMAT, [index, length, begin, first, same], guard=no, meta=src(17),
                                            attrs={"pieces": [{"input": 0}, "/", {"input": 1}, ": ", {"input": 2},
                                                              {"input": 3, "join": ""}, {"input": 4}]})],
                  guard=no, meta=src(17))
    g.create_node(Op.LOOP_END, [begin], attrs={"variables": []}, guard=no, meta=src(17))
    label = g.create_node(Op.FORMAT, [essay, related], guard=no, meta=src(17), attrs={"pieces": [
        "Essay ", {"input": 0, "conversion": "r", "spec": ">12"}, " is ", {"input": 1, "printf": "%-4s"}, "."]})
    g.create_node(Op.OUTPUT, [label, related], guard=no, meta=src(17), attrs={"value": {"dict": [
        ["label", {"input": 0}], ["related", {"input": 1}], ["pair", {"tuple": [{"const": 1}, {"list": []}]}]]}})
    return g


ALL_SAMPLE_GRAPHS = {"linear": linear_graph, "every_op": every_op_graph}
