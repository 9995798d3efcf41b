"""stop_regex and no_stop_trim (SGLang's sampling fields) in the runtime's stop checking, on a real
byte-level BPE tokenizer trained here (the same kind tests/test_stop_and_detok.py uses).

stop_regex ends the request once a pattern matches the decoded output (the matched text stays, as
in SGLang); no_stop_trim keeps a matched stop string in the text; both respect min_new_tokens.
"""
from __future__ import annotations

import re

import pytest
from tokenizers import Tokenizer

from toy_tokenizer import EOS, train_toy_tokenizer
from sglc_runtime.constrained.stop_regex import StopRegexMatcher
from sglc_runtime.output.text_stream import TextStream
from sglc_runtime.sampling.sampling_params import SamplingParams

TEXT = "line one\nline two\n\nThe answer is: 42. Stop here. And more text after it."


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_toy_tokenizer()


def run(tok, params: SamplingParams, text: str = TEXT) -> tuple[TextStream, str]:
    """Feed the text's tokens (then eos) until the stream finishes; (stream, joined deltas)."""
    ts = TextStream(tok, params, eos_token_ids=[EOS])
    out = ""
    for t in tok.encode(text).ids + [EOS]:
        out += ts.append(t)
        if ts.finished:
            break
    return ts, out


@pytest.mark.parametrize("pattern", [r"[0-9]+\.", r"answer is: \d", r"two\n\n", r"[Ss]top", r"(one|two)$"])
def test_stop_regex_ends_at_the_first_match_and_keeps_it(tok, pattern):
    """The output ends with the token that completes the first match; the match is in the text, and no
    earlier prefix of the output matched (Python's ``re.search`` is the oracle)."""
    ts, streamed = run(tok, SamplingParams(max_new_tokens=200, stop_regex=pattern))
    assert ts.finish_reason.to_dict() == {"type": "stop", "matched": pattern}
    assert re.search(pattern, ts.text) and streamed == ts.text
    shorter = tok.decode(ts.output_ids[:-1])
    assert not re.search(pattern, shorter), "stopped one token late"


def test_an_unbounded_stop_regex_searches_the_whole_output(tok):
    """A pattern without a longest match (``line.*answer``) still finds a match spanning many tokens."""
    ts, _ = run(tok, SamplingParams(max_new_tokens=200, stop_regex=r"one(.|\n)*answer"))
    assert ts.finish_reason.type == "stop" and ts.text.endswith("answer")


def test_no_stop_regex_match_runs_to_eos(tok):
    ts, _ = run(tok, SamplingParams(max_new_tokens=200, stop_regex=["zzz", r"\d{5}"]))
    assert ts.finish_reason.to_dict() == {"type": "stop", "matched": EOS} and ts.text == TEXT


def test_stop_regex_waits_for_min_new_tokens(tok):
    """Before min_new_tokens tokens exist a match does not stop the request."""
    first, _ = run(tok, SamplingParams(max_new_tokens=200, stop_regex=r"line"))
    later, _ = run(tok, SamplingParams(max_new_tokens=200, min_new_tokens=len(first.output_ids) + 1,
                                       stop_regex=r"line"))
    assert len(later.output_ids) > len(first.output_ids)


@pytest.mark.parametrize("bad, words", [("((", "cannot be used"), (["ok", 3], "a str or a list of str"),
                                        ("", "must not contain an empty string"), (r"(?<=a)b", "lookbehind"),
                                        (r"(a)\1", "cannot be used")])
def test_a_bad_stop_regex_is_refused_at_construction(bad, words):
    """Invalid patterns and constructs a DFA cannot run are refused before the request starts (parsed,
    not compiled), naming the pattern."""
    with pytest.raises((TypeError, ValueError), match=words):
        SamplingParams(stop_regex=bad)


def test_a_stop_regex_over_the_compile_budget_is_refused_by_its_compile_naming_it():
    """Over budget is the compile's verdict (the engine's compile pool; here the in-process fallback):
    construction accepts the syntax, the compile refuses naming the pattern."""
    params = SamplingParams(stop_regex="a.{40}")
    with pytest.raises(ValueError, match=r"stop_regex 'a\.\{40\}' cannot be used: .*max_dfa_states"):
        StopRegexMatcher(params.stop_regex)


def test_no_stop_trim_keeps_the_stop_string(tok):
    """With no_stop_trim the text ends WITH the stop string; without, before it."""
    trimmed, _ = run(tok, SamplingParams(max_new_tokens=200, stop=" Stop"))
    kept, streamed = run(tok, SamplingParams(max_new_tokens=200, stop=" Stop", no_stop_trim=True))
    assert trimmed.text == "line one\nline two\n\nThe answer is: 42."
    assert kept.text == trimmed.text + " Stop" and streamed == kept.text


def test_a_backtracking_pattern_costs_linear_time(tok):
    """``(a+)+$`` takes Python's re exponential time on "aaa...b"; as a DFA it is one step per character
    (counted, not timed), and the request runs to its end."""

    class CountingDFA:
        def __init__(self, dfa):
            self.dfa, self.steps = dfa, 0
            self.initial, self.finals = dfa.initial, dfa.finals

        def step(self, state, ch):
            self.steps += 1
            return self.dfa.step(state, ch)

    text = "a" * 3000 + "b"
    matcher = StopRegexMatcher([r"(a+)+c$"])
    matcher.dfas = [CountingDFA(d) for d in matcher.dfas]
    assert matcher.feed(text) is None
    assert matcher.dfas[0].steps == len(text)
    ts, _ = run(tok, SamplingParams(max_new_tokens=5000, stop_regex=r"(a+)+c$"), text)
    assert ts.finish_reason.to_dict() == {"type": "stop", "matched": EOS}
