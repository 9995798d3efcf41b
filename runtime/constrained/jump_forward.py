"""Jump-forward planning: append the text a constraint forces, as the tokenizer would spell it.

When a request's constraint state has a forced continuation (``ConstraintState.jump_bytes``),
the engine appends it without sampling. Appending the forced text's own tokens would leave a
token boundary the tokenizer would never produce (``{`` + ``"name`` instead of ``{"`` +
``name``), which the model has rarely seen. So the boundary is retokenized: the last few output
tokens plus the forced text are encoded again, and the request's tail is replaced by the result
from the first token that differs (usually only the last sampled token, which has no KV yet).

:func:`plan_jump` is pure: it returns a :class:`JumpPlan` with the new tail and a constraint
state already synced to it, or None when no jump applies (nothing forced, the output does not
end on a character boundary, the tokenizer does not round-trip the text, or the new tokens
are not ones the constraint's token index allows).

NOTE: multi-byte UTF-8. Byte-level tokens may split a character; the window starts on a
character boundary and the forced bytes are cut to whole characters (``jump_bytes``), so the
retokenized text always decodes cleanly and a jump never ends inside a character.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from sglc import fsm

from .cfg_state import CFGConstraintState
from .state import ConstraintState

#: The constraint states that plan_jump takes (an FSM's and a context-free grammar's).
JUMPABLE_STATES = (ConstraintState, CFGConstraintState)

#: Output tokens before the forced text that are retokenized with it.
DEFAULT_WINDOW = 2


class JumpPlan(NamedTuple):
    """Replace ``output_ids[start:]`` by ``token_ids``; ``state`` is the constraint state after
    them and ``forced`` the forced bytes they add (ending on a whole character; they may begin
    by completing a character the last token split)."""

    start: int
    token_ids: list[int]
    forced: bytes
    state: ConstraintState | CFGConstraintState

    def apply_to(self, output_ids: Sequence[int]) -> list[int]:
        """The output after the jump."""
        return list(output_ids[: self.start]) + self.token_ids


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _window_start(vocab: fsm.Vocabulary, output_ids: Sequence[int], window: int) -> int | None:
    """The index of the first retokenized token: ``window`` tokens back, moved further back
    until that token starts a character. None if the output holds a token without text."""
    start = max(len(output_ids) - window, 0)
    while start > 0:
        data = vocab.token_bytes(output_ids[start])
        if data is None:
            return None
        if not _is_continuation(data[0]):
            break
        start -= 1
    return start


def plan_jump(
    state: ConstraintState | CFGConstraintState,
    output_ids: Sequence[int],
    tokenizer: Any,
    *,
    window: int = DEFAULT_WINDOW,
    max_new_tokens: int | None = None,
) -> JumpPlan | None:
    """Plan a jump-forward from ``state`` (which must have taken exactly ``output_ids``).

    ``tokenizer.encode(text, add_special_tokens=False)`` retokenizes the boundary.
    ``max_new_tokens`` caps the output length after the jump (the tail is cut to fit; the cut
    tokens still spell a valid prefix of the forced text).
    """
    if state.num_tokens != len(output_ids):
        raise ValueError(f"plan_jump: the constraint state took {state.num_tokens} tokens, "
                         f"the output has {len(output_ids)}")
    forced = state.jump_bytes()
    if not forced:
        return None
    vocab = state.vocab
    start = _window_start(vocab, output_ids, window)
    if start is None:
        return None
    old = list(output_ids[start:])
    pieces = [vocab.token_bytes(t) for t in old]
    if any(p is None for p in pieces):
        return None
    data = b"".join(pieces) + forced  # type: ignore[arg-type]
    if data[:1] and _is_continuation(data[0]):
        return None  # the output itself starts inside a character
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    new = list(tokenizer.encode(text, add_special_tokens=False))
    spelled = [vocab.token_bytes(t) if 0 <= t < vocab.size else None for t in new]
    if any(p is None for p in spelled) or b"".join(spelled) != data:  # type: ignore[arg-type]
        return None  # special tokens or a normalizing tokenizer: do not jump
    keep = 0
    while keep < min(len(old), len(new)) and old[keep] == new[keep]:
        keep += 1
    first = start + keep
    tail = new[keep:]
    if max_new_tokens is not None:
        tail = tail[: max(max_new_tokens - first, 0)]
        kept = sum(len(vocab.token_bytes(t)) for t in tail)  # type: ignore[arg-type]
        if kept <= sum(len(p) for p in pieces[keep:]):  # type: ignore[arg-type]
            return None  # the cut tail would add no text
    synced = state.copy()
    try:
        synced.replace_tail(len(output_ids) - first, tail)
    except fsm.ConstraintViolationError:
        return None
    return JumpPlan(first, tail, forced, synced)
