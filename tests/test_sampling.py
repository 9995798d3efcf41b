"""SamplingParams validation, the batched sampler, penalties and logprob helpers (no model)."""
from __future__ import annotations

import math

import pytest
import torch

from sglc_runtime.sampling.logprobs import token_logprobs, top_logprobs
from sglc_runtime.sampling.penalties import PenaltyBatch
from sglc_runtime.sampling.sampler import Sampler, SamplingBatch, make_generator
from sglc_runtime.sampling.sampling_params import SamplingParams

V = 50


def _logits(batch: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, V, generator=torch.Generator().manual_seed(seed)) * 3


def _sample(logits, params, **kw):
    return Sampler(seed=kw.pop("sampler_seed", 0))(logits, SamplingBatch.build(params, V, **kw))


# ---- SamplingParams --------------------------------------------------------------------------

@pytest.mark.parametrize("field,value,exc", [
    ("max_new_tokens", -1, ValueError),
    ("max_new_tokens", 1.5, TypeError),
    ("min_new_tokens", -2, ValueError),
    ("temperature", -0.1, ValueError),
    ("temperature", float("nan"), ValueError),
    ("temperature", 1e308, ValueError),  # float32 would make it inf, and logits / inf NaN
    ("top_p", 0.0, ValueError),
    ("top_p", 1.5, ValueError),
    ("top_k", 0, ValueError),
    ("top_k", -2, ValueError),
    ("min_p", 1.1, ValueError),
    ("frequency_penalty", 2.5, ValueError),
    ("presence_penalty", -3, ValueError),
    ("repetition_penalty", 0.0, ValueError),
    ("seed", -1, ValueError),
    ("seed", "7", TypeError),
    ("stop", 5, TypeError),
    ("stop", ["ok", 3], TypeError),
    ("stop", [""], ValueError),
    ("stop_token_ids", [1, -1], ValueError),
    ("stop_token_ids", "1", TypeError),
    ("ignore_eos", 1, TypeError),
    ("top_logprobs_num", -1, ValueError),
    ("logprob_start_len", -2, ValueError),
])
def test_invalid_sampling_params_raise_naming_the_field(field, value, exc):
    """Every invalid field raises at construction, and the message names the field."""
    with pytest.raises(exc, match=field):
        SamplingParams(**{field: value})


def test_stop_of_wrong_type_names_the_type():
    """A stop that is neither str nor list of str raises TypeError naming the given type."""
    with pytest.raises(TypeError, match="dict"):
        SamplingParams(stop={"a": 1})


def test_min_new_tokens_above_max_is_rejected():
    """min_new_tokens > max_new_tokens can never be satisfied, so it is an error."""
    with pytest.raises(ValueError, match="min_new_tokens"):
        SamplingParams(max_new_tokens=3, min_new_tokens=4)


def test_stop_is_normalized_to_a_list_and_replace_revalidates():
    """A single stop string becomes a one-item list; replace() runs validation again."""
    p = SamplingParams(stop="\n", stop_token_ids=(5,))
    assert p.stop == ["\n"] and p.stop_token_ids == [5]
    assert p.replace(temperature=0).is_greedy
    with pytest.raises(ValueError, match="top_p"):
        p.replace(top_p=0)


def test_sampling_params_are_slotted():
    """Slotted: a misspelled field is an error, not a silently ignored attribute."""
    with pytest.raises(AttributeError):
        SamplingParams().temprature = 0.5


# ---- sampler ---------------------------------------------------------------------------------

def test_a_temperature_too_small_to_divide_by_samples_greedily():
    """Temperatures below 1e-5 (1e-308 would turn logits into inf and NaN) are greedy."""
    logits = _logits(3)
    params = [SamplingParams(temperature=t) for t in (1e-308, 1e-6, 0.0)]
    assert all(p.temperature == 0.0 and p.is_greedy for p in params)
    assert torch.equal(_sample(logits, params), logits.argmax(-1))


def test_all_greedy_batch_is_argmax():
    """temperature 0 (or top_k 1) picks the argmax of each row."""
    logits = _logits(6)
    params = [SamplingParams(temperature=0)] * 5 + [SamplingParams(top_k=1, temperature=0.7)]
    assert torch.equal(_sample(logits, params), logits.argmax(-1))


def test_mixed_batch_greedy_rows_stay_argmax():
    """In a batch mixing greedy and sampled rows, greedy rows still get their argmax."""
    logits = _logits(8)
    params = [SamplingParams(temperature=0) if i % 2 else SamplingParams(temperature=1.5, top_p=0.9) for i in range(8)]
    out = _sample(logits, params)
    assert torch.equal(out[1::2], logits.argmax(-1)[1::2])


def test_sampler_does_not_modify_logits():
    """The caller's logits stay intact (logprobs are computed from them afterwards)."""
    logits = _logits(3)
    before = logits.clone()
    params = [SamplingParams(frequency_penalty=1.0, min_new_tokens=2, max_new_tokens=5, top_k=3)] * 3
    _sample(logits, params, output_ids=[[1, 2], [3], []], eos_token_ids=[0])
    assert torch.equal(logits, before)


def test_top_k_only_returns_top_k_tokens():
    """With top_k = 3 every sample is one of the row's 3 largest logits."""
    logits = _logits(4).repeat(50, 1)
    out = _sample(logits, [SamplingParams(top_k=3, temperature=2.0)] * logits.shape[0])
    allowed = logits.topk(3, dim=-1).indices
    assert (allowed == out.view(-1, 1)).any(-1).all()


def test_top_p_keeps_the_smallest_nucleus():
    """top_p keeps tokens until their mass reaches p: here only the two 0.45 tokens survive."""
    probs = torch.full((V,), 0.1 / (V - 2))
    probs[7] = probs[11] = 0.45
    logits = probs.log().repeat(400, 1)
    out = _sample(logits, [SamplingParams(top_p=0.8)] * 400)
    assert set(out.tolist()) == {7, 11}


def test_min_p_drops_tokens_below_fraction_of_max():
    """min_p = 0.5 drops every token whose probability is below half the top one."""
    probs = torch.tensor([0.4, 0.3, 0.1] + [0.2 / (V - 3)] * (V - 3))
    logits = probs.log().repeat(400, 1)
    out = _sample(logits, [SamplingParams(min_p=0.5)] * 400)
    assert set(out.tolist()) == {0, 1}


def test_sampling_frequencies_follow_the_distribution():
    """Plain sampling (temperature 1) draws tokens with their softmax probabilities."""
    probs = torch.zeros(V)
    probs[:4] = torch.tensor([0.5, 0.25, 0.15, 0.1])
    logits = torch.log(probs.clamp_min(1e-30)).repeat(4000, 1)
    out = _sample(logits, [SamplingParams()] * 4000)
    freq = torch.bincount(out, minlength=V).float() / 4000
    assert torch.allclose(freq[:4], probs[:4], atol=0.03)


def test_temperature_sharpens_and_flattens():
    """Lower temperature makes the top token more frequent than higher temperature does."""
    logits = torch.tensor([[2.0, 1.0, 0.0] + [-30.0] * (V - 3)]).repeat(2000, 1)
    cold = (_sample(logits, [SamplingParams(temperature=0.3)] * 2000) == 0).float().mean()
    hot = (_sample(logits, [SamplingParams(temperature=3.0)] * 2000) == 0).float().mean()
    assert cold > 0.9 and hot < 0.6


def test_seeded_rows_reproduce_regardless_of_batch():
    """A seeded request draws the same tokens alone or batched with other (unseeded) rows."""
    row = _logits(1, seed=3)
    p = SamplingParams(temperature=1.0, top_k=20, top_p=0.95, seed=1234)
    alone_gen, batched_gen = make_generator(1234), make_generator(1234)
    alone, batched = [], []
    for step in range(20):
        alone.append(int(_sample(row, [p], generators=[alone_gen], sampler_seed=step)[0]))
        big = torch.cat([_logits(3, seed=step + 10), row])
        others = [SamplingParams(top_k=40), SamplingParams(), SamplingParams(temperature=0)]
        out = _sample(big, others + [p], generators=[None, None, None, batched_gen], sampler_seed=99 + step)
        batched.append(int(out[3]))
    assert alone == batched and len(set(alone)) > 1


def test_bool_mask_restricts_choice_even_when_greedy():
    """A constraint mask wins over argmax: only allowed tokens come out, greedy or sampled."""
    logits = _logits(2)
    mask = torch.zeros(V, dtype=torch.bool)
    mask[[3, 9]] = True
    out = _sample(logits, [SamplingParams(temperature=0), SamplingParams()], masks=[mask, mask])
    assert set(out.tolist()) <= {3, 9}
    assert out[0] == (3 if logits[0, 3] > logits[0, 9] else 9)


def test_short_bool_mask_disallows_padded_vocab_and_additive_mask_adds():
    """A mask shorter than V forbids the ids past it; a float mask is added to the logits."""
    logits = torch.zeros(2, V)
    logits[:, V - 1] = 10.0
    short = torch.ones(V - 5, dtype=torch.bool)
    additive = torch.zeros(V)
    additive[4] = 100.0
    out = _sample(logits, [SamplingParams(temperature=0)] * 2, masks=[short, additive])
    assert out[0] < V - 5 and out[1] == 4


def test_mask_allowing_nothing_raises():
    """An all-False mask is a constraint bug; it is reported rather than sampling garbage."""
    with pytest.raises(ValueError, match="row 0"):
        _sample(_logits(1), [SamplingParams(temperature=0)], masks=[torch.zeros(V, dtype=torch.bool)])


def test_checked_masks_skip_the_dead_row_read_unless_tokens_were_banned():
    """masks_checked (the runner checked each mask allows some token) skips the read of the
    masked logits; with tokens banned (min_new_tokens) the mask and the ban together can still
    leave nothing, and that is still caught."""
    logits = torch.zeros(2, V)
    only_eos = torch.zeros(V, dtype=torch.bool)
    only_eos[2] = True
    params = [SamplingParams(temperature=0, min_new_tokens=4)] * 2
    batch = SamplingBatch.build(params, V, output_ids=[[7], [7]], masks=[only_eos, only_eos], masks_checked=True,
                                eos_token_ids=[2])
    with pytest.raises(ValueError, match="allows no token"):
        Sampler(seed=0)(logits, batch)
    unbanned = [SamplingParams(temperature=0)] * 2
    batch = SamplingBatch.build(unbanned, V, masks=[only_eos, only_eos], masks_checked=True, eos_token_ids=[2])
    assert Sampler(seed=0)(logits, batch).tolist() == [2, 2]


def test_masks_on_every_row_and_on_some_rows_restrict_alike():
    """Every row masked (one in-place fill) and some rows masked (an indexed fill) give the same
    rows the same tokens."""
    logits = _logits(3)
    mask = torch.zeros(V, dtype=torch.bool)
    mask[[5, 11, 17]] = True
    greedy = [SamplingParams(temperature=0)] * 3
    every = _sample(logits, greedy, masks=[mask, mask, mask])
    some = _sample(logits, greedy, masks=[mask, None, mask])
    assert every[0] == some[0] and every[2] == some[2] and set(every.tolist()) <= {5, 11, 17}
    assert some[1] == int(logits[1].argmax())


def test_mask_liveness_reads_each_mask_once_and_forgets_dropped_ones():
    import gc

    from sglc_runtime.sampling.mask_liveness import MaskLiveness

    live = MaskLiveness(V, "cpu")
    some, none = torch.zeros(V, dtype=torch.bool), torch.zeros(V, dtype=torch.bool)
    some[3] = True
    past_vocab = torch.zeros(V + 4, dtype=torch.bool)
    past_vocab[V + 1] = True  # NOTE: ids past the model's vocabulary are never allowed
    assert live.allow_some([some, none, past_vocab, some]) == [True, False, False, True]
    some[3] = False  # NOTE: masks are immutable in use; this shows the answer is memoized
    assert live.allow_some([some]) == [True]
    del some
    gc.collect()
    fresh = torch.zeros(V, dtype=torch.bool)  # may reuse the dropped tensor's id
    assert live.allow_some([fresh]) == [False]


def test_min_new_tokens_bans_eos_and_stop_ids_until_reached():
    """Before min_new_tokens outputs exist eos/stop ids cannot be chosen; afterwards they can."""
    logits = torch.zeros(1, V)
    logits[0, 2] = 50.0  # eos
    p = SamplingParams(temperature=0, min_new_tokens=2, max_new_tokens=8, stop_token_ids=[4])
    assert _sample(logits, [p], output_ids=[[7]], eos_token_ids=[2]).item() not in (2, 4)
    assert _sample(logits, [p], output_ids=[[7, 8]], eos_token_ids=[2]).item() == 2
    ignore = p.replace(ignore_eos=True)
    logits[0, 4] = 60.0
    assert _sample(logits, [ignore], output_ids=[[7]], eos_token_ids=[2]).item() == 2


# ---- penalties -------------------------------------------------------------------------------

def test_frequency_and_presence_penalties_match_formula():
    """logit -= frequency * count + presence * [count > 0], only on penalized rows."""
    logits = _logits(2)
    params = [SamplingParams(frequency_penalty=0.5, presence_penalty=1.0), SamplingParams()]
    pb = PenaltyBatch.build(params, [[3, 3, 7], [3]], V)
    out = logits.clone()
    pb.apply(out)
    expect = logits.clone()
    expect[0, 3] -= 0.5 * 2 + 1.0
    expect[0, 7] -= 0.5 + 1.0
    assert torch.allclose(out, expect)


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    """Seen tokens: positive logits shrink (/ r), negative ones grow in magnitude (* r)."""
    logits = torch.zeros(1, V)
    logits[0, 1], logits[0, 2], logits[0, 3] = 2.0, -2.0, 2.0
    pb = PenaltyBatch.build([SamplingParams(repetition_penalty=2.0)], [[1, 2]], V)
    pb.apply(logits)
    assert logits[0, :4].tolist() == [0.0, 1.0, -4.0, 2.0]


def test_no_penalties_builds_nothing():
    """The common case (no penalties) costs nothing per step."""
    assert PenaltyBatch.build([SamplingParams()] * 4, [[1]] * 4, V) is None


def test_presence_penalty_changes_greedy_choice():
    """A strong presence penalty steers greedy decoding away from an already used token."""
    logits = torch.zeros(1, V)
    logits[0, 5], logits[0, 6] = 1.0, 0.5
    p = SamplingParams(temperature=0, presence_penalty=2.0)
    assert _sample(logits, [p], output_ids=[[]]).item() == 5
    assert _sample(logits, [p], output_ids=[[5]]).item() == 6


# ---- logprobs --------------------------------------------------------------------------------

def test_token_and_top_logprobs_match_log_softmax():
    """Chosen-token and top-k logprobs are log_softmax of the original logits."""
    logits = _logits(3)
    ids = torch.tensor([1, 2, 3])
    ref = torch.log_softmax(logits, -1)
    assert torch.allclose(token_logprobs(logits, ids), ref[torch.arange(3), ids], atol=1e-6)
    vals, top = top_logprobs(logits, 4)
    assert torch.equal(top, ref.topk(4).indices) and torch.allclose(vals, ref.topk(4).values)
    assert math.isclose(float(torch.logsumexp(vals[0], 0)), float(torch.logsumexp(ref[0, top[0]], 0)), rel_tol=1e-6)


def test_seeded_rows_sample_by_the_distribution():
    """Rows with their own seeds (one step each, many seeds) pick tokens at p's frequencies."""
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(500, 1)
    counts = torch.zeros(4)
    for base in range(0, 4000, 500):
        gens = [make_generator(base + i) for i in range(500)]
        batch = SamplingBatch.build([SamplingParams(temperature=1.0)] * 500, 4, generators=gens)
        counts += torch.bincount(Sampler(seed=0)(logits, batch), minlength=4)
    torch.testing.assert_close(counts / counts.sum(), probs, atol=0.025, rtol=0)
