"""Incremental detokenization, stop rules and streaming hold-back, on real tokenizers.

The unit tests use a small byte-level BPE trained here with the `tokenizers` library (a real
tokenizer: multi-byte characters are split over several byte tokens because the training text
is ASCII only). One model-marked test repeats the round trip on the default model's tokenizer.
"""
from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from toy_tokenizer import EOS, train_toy_tokenizer
from sglc_runtime.output.detokenizer import IncrementalDetokenizer
from sglc_runtime.output.stop_checker import FinishReason, StopChecker
from sglc_runtime.output.text_stream import TextStream
from sglc_runtime.sampling.sampling_params import SamplingParams

TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "café naïve — 日本語のテキスト 🙂👍🏽 done",
    "emoji at the end 🎉",
    "line one\nline two\n\nThe answer is: 42. Stop here.",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_toy_tokenizer()


def _stream(tok, text, params, prompt_ids=()):
    ts = TextStream(tok, params, eos_token_ids=[EOS], prompt_ids=prompt_ids)
    deltas = []
    for t in tok.encode(text).ids + [EOS]:
        deltas.append(ts.append(t))
        if ts.finished:
            break
    return ts, deltas


# ---- detokenizer -----------------------------------------------------------------------------

@pytest.mark.parametrize("text", TEXTS)
def test_incremental_decode_concatenates_to_full_decode_without_partial_chars(tok, text):
    """Deltas never contain U+FFFD for valid text and join to exactly the full decode."""
    ids = tok.encode(text).ids
    assert len(ids) > len(text.encode()) // 4  # multi-byte chars really are split
    d = IncrementalDetokenizer(tok)
    deltas = [d.append(i) for i in ids] + [d.flush()]
    assert all("\ufffd" not in x for x in deltas)
    assert "".join(deltas) == tok.decode(ids) == text == d.text


def test_split_character_waits_until_complete(tok):
    """The bytes of one emoji give no text until the last byte arrives."""
    ids = tok.encode("🙂").ids
    assert len(ids) == 4
    d = IncrementalDetokenizer(tok)
    assert [d.append(i) for i in ids] == ["", "", "", "🙂"]


def test_text_before_an_incomplete_character_is_emitted(tok):
    """Stable text is not delayed by a character still being completed in the same window."""
    ids = tok.encode("ab🙂").ids
    d = IncrementalDetokenizer(tok)
    out = [d.append(i) for i in ids]
    assert "".join(out) == "ab🙂" and out[-1] == "🙂"


def test_context_ids_are_not_emitted(tok):
    """Prompt tokens given as context shape decoding but never appear in the output."""
    prompt = tok.encode("hello world").ids
    d = IncrementalDetokenizer(tok, context_ids=prompt)
    out = "".join(d.append(i) for i in tok.encode(" the fox").ids)
    assert out == " the fox" and d.output_ids == tok.encode(" the fox").ids


def test_flush_emits_incomplete_bytes_at_the_end(tok):
    """A request that ends mid-character still returns what it has (as U+FFFD)."""
    d = IncrementalDetokenizer(tok)
    for i in tok.encode("x🙂").ids[:-1]:
        d.append(i)
    assert d.text == "x" and d.flush().startswith("\ufffd")


def test_special_tokens_skipped_or_kept(tok):
    """skip_special_tokens=False keeps the eos text; the default drops it."""
    ids = tok.encode("hi").ids + [EOS]
    kept = IncrementalDetokenizer(tok, skip_special_tokens=False)
    dropped = IncrementalDetokenizer(tok)
    assert "".join(kept.append(i) for i in ids) + kept.flush() == "hi<eos>"
    assert "".join(dropped.append(i) for i in ids) + dropped.flush() == "hi"


# ---- stop rules ------------------------------------------------------------------------------

def test_finish_reasons_have_sglang_shape():
    """Finish reasons serialize like SGLang's."""
    assert FinishReason.stop(2).to_dict() == {"type": "stop", "matched": 2}
    assert FinishReason.stop("\n").to_dict() == {"type": "stop", "matched": "\n"}
    assert FinishReason.of_length(5).to_dict() == {"type": "length", "length": 5}
    assert FinishReason.abort("gone").to_dict() == {"type": "abort", "message": "gone"}


def test_eos_stops_unless_ignored_and_stop_ids_always_stop():
    """eos ends a request unless ignore_eos; explicit stop_token_ids end it either way."""
    c = StopChecker(SamplingParams(stop_token_ids=[9]), eos_token_ids=[EOS])
    assert c.check_token(EOS, 1) == FinishReason.stop(EOS)
    ign = StopChecker(SamplingParams(stop_token_ids=[9], ignore_eos=True), eos_token_ids=[EOS])
    assert ign.check_token(EOS, 1) is None and ign.check_token(9, 1) == FinishReason.stop(9)


def test_min_new_tokens_defers_every_stop():
    """No stop id, eos or stop string ends the request before min_new_tokens tokens exist."""
    c = StopChecker(SamplingParams(min_new_tokens=3, stop=["x"]), eos_token_ids=[EOS])
    assert c.check_token(EOS, 3) is None and c.check_token(EOS, 4) is not None
    assert c.find_stop_str("ax", 1, 3) is None and c.find_stop_str("ax", 1, 4) == (1, "x")


def test_length_limit(tok):
    """max_new_tokens ends the request with a length reason carrying the count."""
    ts, _ = _stream(tok, TEXTS[0], SamplingParams(max_new_tokens=3))
    assert ts.finish_reason == FinishReason.of_length(3) and len(ts.output_ids) == 3


def test_stop_string_split_across_tokens_is_found_and_cut(tok):
    """A stop string spanning several tokens ends the request; the text stops right before it."""
    ts, deltas = _stream(tok, TEXTS[3], SamplingParams(stop=["answer is"]))
    assert ts.finish_reason == FinishReason.stop("answer is")
    assert ts.text == "line one\nline two\n\nThe " == "".join(deltas)


def test_earliest_of_several_stop_strings_wins(tok):
    """With several stop strings completed by one token, the one starting first cuts."""
    c = StopChecker(SamplingParams(stop=["two", "e t"]))
    assert c.find_stop_str("one two", 3, 2) == (2, "e t")


def test_streaming_holds_back_a_possible_stop_prefix(tok):
    """Characters that might begin a stop string are not streamed until ruled out."""
    ts = TextStream(tok, SamplingParams(stop=["fox!"]), eos_token_ids=[EOS])
    sent = ""
    for t in tok.encode("the fox jumps").ids:
        sent += ts.append(t)
        assert "fox!".startswith(ts.text[len(sent):]) or ts.text[len(sent):] == ""
        if ts.text.endswith("fo"):
            assert sent.endswith("the ")
    sent += ts.append(EOS)
    assert sent == "the fox jumps" and ts.finish_reason == FinishReason.stop(EOS)


def test_stop_token_text_is_not_output(tok):
    """A matched stop token stays in output_ids but its text is not in the output."""
    ts, deltas = _stream(tok, "hello world", SamplingParams(skip_special_tokens=False))
    assert ts.text == "hello world" == "".join(deltas) and ts.output_ids[-1] == EOS


def test_abort_returns_the_held_back_text(tok):
    """finish(abort) streams what was held back and records the abort reason."""
    ts = TextStream(tok, SamplingParams(stop=["world!"]), eos_token_ids=[EOS])
    sent = "".join(ts.append(t) for t in tok.encode("hello wor").ids)
    assert sent == "hello "
    assert sent + ts.finish(FinishReason.abort("client left")) == "hello wor"
    assert ts.finish_reason.to_dict() == {"type": "abort", "message": "client left"}
    with pytest.raises(RuntimeError):
        ts.append(5)


@pytest.mark.model
def test_real_model_tokenizer_round_trip():
    """The default model's tokenizer streams multilingual text without partial characters."""
    from sglc_runtime.model.default_model import resolve_model_path
    from sglc_runtime.model.tokenizer import Tokenizer as ModelTokenizer

    tok = ModelTokenizer(resolve_model_path(None))
    for text in TEXTS:
        ids = tok.encode(text)
        d = IncrementalDetokenizer(tok)
        deltas = [d.append(i) for i in ids] + [d.flush()]
        assert all("\ufffd" not in x for x in deltas) and "".join(deltas) == tok.decode(ids) == text
    ts = TextStream(tok, SamplingParams(stop=["テキスト"]), eos_token_ids=tok.stop_token_ids)
    sent = ""
    for i in tok.encode(TEXTS[1]):
        sent += ts.append(i)
        if ts.finished:
            break
    assert ts.finish_reason == FinishReason.stop("テキスト") and sent == ts.text == "café naïve — 日本語の"
