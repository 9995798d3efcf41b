"""Grouping decode requests by the prefix of KV slots they share (attention/shared_prefix.py)."""
from __future__ import annotations

import torch

from sglc_runtime.model.attention.shared_prefix import shared_prefix_groups


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, list[int]]:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [r[0]] * (width - len(r)) for r in rows]), [len(r) for r in rows]


def test_requests_under_one_prefix_form_one_group_of_their_common_slots():
    prefix = list(range(100, 150))
    index, lens = padded([prefix + [1, 2], prefix + [3], prefix[:45] + [7] * 10 + [8]])
    group_of, prefix_lens = shared_prefix_groups(index, lens)
    assert group_of.tolist() == [0, 0, 0] and prefix_lens.tolist() == [45]


def test_groups_are_keyed_by_first_slot_and_loners_stay_out():
    a, b = list(range(0, 40)), list(range(1000, 1064))
    index, lens = padded([a + [50], b + [60], a + [51, 52], [900] * 45, b + [61]])
    group_of, prefix_lens = shared_prefix_groups(index, lens)
    assert group_of.tolist() == [0, 1, 0, -1, 1] and prefix_lens.tolist() == [40, 64]


def test_a_request_keeps_its_new_token_and_short_prefixes_are_not_worth_a_group():
    same = list(range(40))
    index, lens = padded([same, same + [99]])  # the first is all prefix: it keeps its last slot
    group_of, prefix_lens = shared_prefix_groups(index, lens)
    assert prefix_lens.tolist() == [39]
    index, lens = padded([list(range(20)) + [1], list(range(20)) + [2]])
    assert shared_prefix_groups(index, lens) is None  # 20 < MIN_SHARED_SLOTS
    assert shared_prefix_groups(*padded([list(range(64))])) is None  # one request
