"""ChatTemplate (per-role prefix/suffix text) and its derivation from a tokenizer's jinja chat
template.

The executor builds prompts text-first: ``ROLE_BEGIN user`` appends the user prefix, the
content follows, ``ROLE_END`` appends the suffix. So the template must decompose as
``prefix[role] + content + suffix[role]`` per message. We render small conversations whose
contents are sentinel words and split the text at the sentinels; a template that does not
decompose that way (it rewrites contents, or messages depend on each other beyond the first
one) gets None, never a wrong answer.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
# NOTE: plain alphanumeric words: templates may trim or escape contents, never these.
_SYS, _MSG, _NEXT = "SGLCSENTINELSYSTEM", "SGLCSENTINELMESSAGE", "SGLCSENTINELNEXT"


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """Text around each role's content, e.g. ChatML: ("<|im_start|>user\\n", "<|im_end|>\\n")."""

    role_prefix: dict[str, str]
    role_suffix: dict[str, str]
    #: Text the template adds to ask the model for an assistant turn (ROLE_BEGIN assistant).
    generation_prefix: str = ""


Render = Callable[..., Any]  # render(messages, add_generation_prompt=bool) -> str


def derive_chat_template(render: Render) -> ChatTemplate | None:
    """The role prefixes/suffixes of the template `render` applies, or None if it does not split.

    `render(messages, add_generation_prompt=False)` must return the rendered text (e.g. the
    runtime Tokenizer's ``apply_chat_template(..., tokenize=False)``). A system message comes
    first in every probe so templates that insert a default system prompt do not interfere.
    """
    try:
        return _derive(render)
    except Exception as err:  # a template that raises on a probe is simply not decomposable
        log.warning("chat template cannot be split into role prefixes/suffixes: %s", err)
        return None


def _split(text: str, *words: str) -> list[str] | None:
    """text == parts[0] + words[0] + parts[1] + ... with each word occurring exactly once."""
    parts, rest = [], text
    for w in words:
        if rest.count(w) != 1:
            return None
        head, rest = rest.split(w)
        parts.append(head)
    parts.append(rest)
    return parts


def _derive(render: Render) -> ChatTemplate | None:
    def r(messages: list[tuple[str, str]], gen: bool = False) -> str:
        return render([{"role": role, "content": c} for role, c in messages], add_generation_prompt=gen)

    base = _split(r([("system", _SYS)]), _SYS)
    if base is None:
        return None
    prefix, suffix = {"system": base[0]}, {"system": base[1]}
    for role in ("user", "assistant"):
        parts = _split(r([("system", _SYS), (role, _MSG)]), _SYS, _MSG)
        if parts is None or parts[0] != base[0] or not parts[1].startswith(base[1]):
            return None
        prefix[role], suffix[role] = parts[1][len(base[1]):], parts[2]
        # A second message of the same role must render the same way (no first-message quirks).
        again = _split(r([("system", _SYS), (role, _MSG), (role, _NEXT)]), _SYS, _MSG, _NEXT)
        if again is None or again[2] != suffix[role] + prefix[role] or again[3] != suffix[role]:
            return None
    plain = r([("system", _SYS), ("user", _MSG)])
    asked = r([("system", _SYS), ("user", _MSG)], gen=True)
    if not asked.startswith(plain):
        return None
    return ChatTemplate(role_prefix=prefix, role_suffix=suffix, generation_prefix=asked[len(plain):])
