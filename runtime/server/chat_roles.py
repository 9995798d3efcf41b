"""The message roles a model's chat template handles, read from the template's own source.

A template names the roles it treats specially in comparisons (``message['role'] == 'system'``,
``message.role in ['user', 'tool']``); a template that also prints the role it is given
(ChatML's ``'<|im_start|>' + message['role']``) renders any name, but the model was trained on
system / user / assistant only. So the accepted roles are the names the template compares the
role with, plus system / user / assistant when it prints the role itself (or names none at all).
A chat message with another role (``"root"``) is refused before rendering: it would reach the
model as text it was never trained to trust.
"""
from __future__ import annotations

import re
from typing import Iterator

__all__ = ["BASE_ROLES", "template_roles"]

#: What every chat template that prints the role is trained on (OpenAI's core roles).
BASE_ROLES = frozenset({"system", "user", "assistant"})
#: transformers' {% generation %} block (an extension tag plain jinja cannot parse): its body stays.
_GENERATION_TAG = re.compile(r"{%-?\s*(end)?generation\s*-?%}")


def template_roles(source: str | None) -> frozenset[str]:
    """The roles the chat template `source` handles (BASE_ROLES when it cannot be read)."""
    if not source:
        return BASE_ROLES
    import jinja2
    from jinja2 import nodes

    try:
        ast = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(_GENERATION_TAG.sub("", source))
    except jinja2.TemplateSyntaxError:
        return BASE_ROLES  # NOTE: rendering reports the template's own error
    named: set[str] = set()
    for compare in ast.find_all(nodes.Compare):
        sides = [compare.expr] + [op.expr for op in compare.ops]
        if any(_is_role(side) for side in sides):
            for side in sides:
                named.update(_strings(side))
    prints_role = any(_is_role(node) for output in ast.find_all(nodes.Output) for node in _walk(output))
    return frozenset(named | BASE_ROLES) if prints_role or not named else frozenset(named)


def _is_role(node: object) -> bool:
    """``x['role']``, ``x.role`` or a variable named ``role``."""
    from jinja2 import nodes

    return (isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "role"
            or isinstance(node, nodes.Getattr) and node.attr == "role"
            or isinstance(node, nodes.Name) and node.name == "role")


def _strings(node: object) -> Iterator[str]:
    """The string constants of a comparison side: 'x', or a list / tuple of them."""
    from jinja2 import nodes

    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (nodes.List, nodes.Tuple)):
        for item in node.items:
            yield from _strings(item)


def _walk(node: object) -> Iterator[object]:
    from jinja2 import nodes

    yield node
    if isinstance(node, nodes.Node):
        for child in node.iter_child_nodes():
            yield from _walk(child)
