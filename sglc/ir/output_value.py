"""The template an OUTPUT node stores: what a program's function returned, with the values that
exist only at run time (a gen's text, an argument) as references to the node's inputs.

    {"const": v}                 a value in the attribute domain (None, bool, int, float, str, ...)
    {"input": i}                 the run-time value of the node's input i
    {"list": [t, ...]}           a list (and {"tuple": [...]}: a tuple) of templates
    {"dict": [[key, t], ...]}    a dict with constant str/int/bool/None keys, in order
    {"state": True}              the program's own state (`return s`)

`check` returns a problem or None (op_rules uses it); `build` turns a template and its inputs'
values into the Python value (the executor uses it).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

_KINDS = ("const", "input", "list", "tuple", "dict", "state")
MAX_DEPTH = 32


def check(template: Any, num_inputs: int, depth: int = 0) -> Optional[str]:
    """What is wrong with `template` for a node with `num_inputs` inputs (None: nothing)."""
    if depth > MAX_DEPTH:
        return f"is nested deeper than {MAX_DEPTH} levels"
    if not isinstance(template, dict) or len(template) != 1 or next(iter(template)) not in _KINDS:
        return f"must be a one-key dict whose key is one of {list(_KINDS)}, got {_short(template)}"
    kind, body = next(iter(template.items()))
    if kind == "input":
        if not isinstance(body, int) or isinstance(body, bool) or not 0 <= body < num_inputs:
            return f"refers to input {body!r}, but the node has {num_inputs}"
    elif kind in ("list", "tuple"):
        if not isinstance(body, list):
            return f"{kind} must hold a list of templates"
        for item in body:
            problem = check(item, num_inputs, depth + 1)
            if problem:
                return problem
    elif kind == "dict":
        if not isinstance(body, list) or not all(isinstance(e, list) and len(e) == 2 for e in body):
            return "dict must hold [key, template] pairs"
        for key, item in body:
            if not (key is None or isinstance(key, (str, int, bool))):
                return f"dict key {key!r} must be a str, int, bool or None"
            problem = check(item, num_inputs, depth + 1)
            if problem:
                return problem
    elif kind == "state" and body is not True:
        return "state must be True"
    return None


def build(template: Any, inputs: Sequence[Any], state: Callable[[], Any] = lambda: None) -> Any:
    """The Python value of a (checked) template; `state()` gives the program's state."""
    kind, body = next(iter(template.items()))
    if kind == "const":
        return body
    if kind == "input":
        return inputs[body]
    if kind == "list":
        return [build(t, inputs, state) for t in body]
    if kind == "tuple":
        return tuple(build(t, inputs, state) for t in body)
    if kind == "dict":
        return {key: build(t, inputs, state) for key, t in body}
    return state()


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
