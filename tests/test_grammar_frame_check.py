"""The matcher's frame checks (sglc/grammar/frame_check.py) agree with the walk over the whole
stack: wherever the nearest frames decide a context-dependent group, the decision is what
walking the group's suffix through the real stack gives; at the stack's bottom they always
decide; masks are the same with the frame checks off, also under nesting deeper than the frames
the matcher looks at.
"""
from __future__ import annotations

import numpy as np
import pytest

import sglc.grammar.matcher as matcher_module
from sglc.grammar import GrammarMatcher, compile_grammar
from sglc.grammar.frame_check import DEPENDS, REFUSED, TAKEN
from test_grammar_engine_cases import GRAMMARS, sample_tokens, smollm2_vocab


def _frame_decisions(compiled, m: GrammarMatcher, counts: dict[str, int]) -> None:
    """Every (stack, group) of the matcher's state: the frames' answer, one frame at a time
    down to the bottom, against the full walk."""
    pool = m._pool
    for s in m._states[-1].stacks:
        for g, exit_node in compiled.node_groups[pool.node[s]]:
            full = pool.walk(pool.closure(pool.intern(exit_node, pool.parent[s])), compiled.classes.suffixes[g]).alive
            q, frames = pool.parent[s], ()
            while True:
                if q >= 0:
                    frames += (pool.node[q],)
                    q = pool.parent[q]
                decided = compiled.frame_check(g, frames, q < 0)
                if decided != DEPENDS:
                    assert decided == (TAKEN if full else REFUSED), (g, frames)
                    counts["decided"] += 1
                    counts["by_one_frame"] += len(frames) <= 1
                    break
                assert q >= 0, "the frames down to the stack's bottom must decide"
                counts["depends"] += 1


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_frame_decisions_are_the_full_walks(name):
    compiled = compile_grammar(GRAMMARS[name](), smollm2_vocab())
    rng = np.random.default_rng(11)
    counts = {"decided": 0, "by_one_frame": 0, "depends": 0}
    for _ in range(6):
        sample_tokens(compiled, rng, free_steps=int(rng.integers(10, 50)),
                      on_step=lambda m, _out: _frame_decisions(compiled, m, counts))
    if name == "arithmetic":  # NOTE: its context-dependent tokens ("1)", "2+") meet real stacks
        assert counts["decided"] > 50 and counts["depends"] > 0


def _masks_along(compiled, text: bytes) -> list[np.ndarray]:
    m = GrammarMatcher(compiled)
    out = [m.mask().copy()]
    for i in range(len(text)):
        m.advance_bytes(text[i:i + 1])
        out.append(m.mask().copy())
    return out


def test_masks_are_the_same_without_frame_checks_under_deep_nesting(monkeypatch):
    """Ten nested parentheses: past the frames the matcher looks at, the whole stack decides."""
    compiled = compile_grammar(GRAMMARS["arithmetic"](), smollm2_vocab())
    text = b"(" * 10 + b"1+2*(3-4)" + b")" * 10 + b"/5"
    with_frames = _masks_along(compiled, text)
    monkeypatch.setattr(matcher_module, "_FRAMES_CHECKED", 0)
    walked = _masks_along(compile_grammar(GRAMMARS["arithmetic"](), smollm2_vocab()), text)
    assert len(with_frames) == len(walked)
    for i, (a, b) in enumerate(zip(with_frames, walked)):
        assert np.array_equal(a, b), f"mask after {text[:i]!r}"
    assert sum(int(a.sum()) for a in walked) > 0
