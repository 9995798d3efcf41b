"""SGLang's select normalization methods on fixed numbers."""
import random

import pytest

from sglc.executor.select_methods import (
    decide,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)


def test_token_length_normalized_picks_the_highest_mean_logprob():
    """Mean, not sum: a long choice with good tokens beats a short one with a worse token."""
    decision = token_length_normalized([[-1.0, -1.0, -1.0], [-2.0]])
    assert decision.index == 0 and decision.scores == [-1.0, -2.0]


def test_ties_go_to_the_earliest_choice():
    """Equal scores pick the first choice (deterministic like numpy argmax)."""
    assert token_length_normalized([[-1.0], [-0.5, -1.5], [-1.0]]).index == 0


def test_greedy_token_selection_prunes_position_by_position():
    """At token 0 choices 1 and 2 tie at the best logprob; at token 1 choice 2 is better."""
    decision = greedy_token_selection([[-0.9, -0.1], [-0.2, -0.8], [-0.2, -0.3]])
    assert decision.index == 2
    assert decision.scores == pytest.approx([-0.5, -0.5, -0.25])


def test_greedy_token_selection_pads_a_short_choice_with_its_mean():
    """A one-token choice continues with its mean (-0.4) and beats a longer one's worse 2nd token."""
    assert greedy_token_selection([[-0.4], [-0.4, -0.9]]).index == 0
    assert greedy_token_selection([[-0.4], [-0.4, -0.1]]).index == 1


def test_greedy_token_selection_can_disagree_with_the_mean():
    """The best first token wins even when its mean is worse."""
    logprobs = [[-0.1, -5.0], [-0.3, -0.3]]
    assert greedy_token_selection(logprobs).index == 0
    assert token_length_normalized(logprobs).index == 1


def test_unconditional_normalization_subtracts_the_prompt_free_likelihood():
    """mean(cond - uncond): a choice likely with or without the prompt loses to one the prompt favours."""
    cond = [[-0.5], [-1.0]]
    uncond = [[-0.4], [-3.0]]
    decision = unconditional_likelihood_normalized(cond, uncond)
    assert decision.index == 1 and decision.scores == pytest.approx([-0.1, 2.0])


def test_unconditional_normalization_needs_the_unconditional_logprobs():
    """Without them it is an error, not a silent fallback."""
    with pytest.raises(ValueError, match="unconditional"):
        decide("unconditional_likelihood_normalized", [[-1.0]])


def test_unknown_method_is_rejected_by_name():
    """An unknown method name lists the known ones."""
    with pytest.raises(ValueError, match="token_length_normalized"):
        decide("majority_vote", [[-1.0]])


def test_temperature_samples_in_proportion_to_softmax_of_scores():
    """temperature > 0 samples; a very low temperature is effectively the argmax."""
    rng = random.Random(0)
    picks = [decide("token_length_normalized", [[-1.0], [-1.2]], temperature=1.0, rng=rng).index for _ in range(400)]
    assert 0.45 < picks.count(0) / 400 < 0.65  # softmax([-1, -1.2]) = [0.55, 0.45]
    assert all(decide("token_length_normalized", [[-1.0], [-3.0]], temperature=1e-3, rng=rng).index == 0
               for _ in range(50))
