"""A string ``pattern`` inside a JSON schema constrains the decoded string; the generated text is
its JSON encoding. json_escaped maps a regex tree over characters to the tree over their
encodings (``"``, ``\\`` and control characters escaped, everything else raw)."""
from __future__ import annotations

from .charset import CharSet
from .regex_ast import Alt, Anchor, Chars, Concat, Node, Repeat, literal

_JSON_SPECIAL = CharSet.of_ranges([(0, 0x1F), (ord('"'), ord('"')), (ord("\\"), ord("\\"))])
_SHORT_ESCAPES = {
    '"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
}


def json_escaped(node: Node) -> Node:
    """The tree matching the JSON string-body encodings of what ``node`` matches."""
    if isinstance(node, Chars):
        raw = node.chars.difference(_JSON_SPECIAL)
        options: list[Node] = [Chars(raw)] if raw else []
        for lo, hi in node.chars.intersection(_JSON_SPECIAL).ranges:
            for cp in range(lo, hi + 1):
                ch = chr(cp)
                options.append(literal(_SHORT_ESCAPES.get(ch, f"\\u{cp:04x}")))
        if len(options) == 1:
            return options[0]
        return Alt(tuple(options)) if options else Chars(CharSet())
    if isinstance(node, Concat):
        return Concat(tuple(json_escaped(i) for i in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(json_escaped(o) for o in node.options))
    if isinstance(node, Repeat):
        return Repeat(json_escaped(node.item), node.min, node.max)
    assert not isinstance(node, Anchor)
    return node
