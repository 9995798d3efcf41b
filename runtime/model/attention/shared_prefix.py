"""Which decode requests of a batch share a prefix of KV slots, for cascade attention.

The radix cache gives every request that matched a cached prefix the very same KV slots, so a
shared prefix shows up as equal leading entries of the requests' slot rows. The native decode
kernel (``native/``) attends such a prefix once for all of its requests and merges each
request's own keys in (a log-sum-exp merge of softmax states); this module finds the groups.

Requests are grouped by their first slot, and a group's prefix is the longest run of leading
slots all its members have in common. A request sharing a long prefix with part of its group and
a short one with the rest gets the short one (no sub-grouping): the common case, many requests
under one few-shot prompt or one document, is one group.
"""
from __future__ import annotations

import torch

#: Fewer shared slots than this are attended per request: the merge and the extra pass cost
#: about what reading a few dozen keys twice does.
MIN_SHARED_SLOTS = 32


def shared_prefix_groups(
    index: torch.Tensor, lens: list[int], min_shared: int = MIN_SHARED_SLOTS
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``index``: LongTensor[B, Lmax], each decode request's slots (padded); ``lens``: their lengths.

    Returns ``(prefix_group, prefix_lens)``: LongTensor[B], each request's group or -1, and
    LongTensor[G], the slots every member of group g shares (at most its length - 1: a request
    keeps at least its new token as its own). None when no two requests share ``min_shared``.
    """
    if len(lens) < 2:
        return None
    members_of: dict[int, list[int]] = {}
    for r, first in enumerate(index[:, 0].tolist()):
        members_of.setdefault(first, []).append(r)
    group_of = [-1] * len(lens)
    prefix_lens: list[int] = []
    for members in members_of.values():
        if len(members) < 2:
            continue
        limit = min(lens[r] for r in members) - 1
        if limit < min_shared:
            continue
        rows = index[members, :limit]
        same = (rows == rows[:1]).all(0)
        shared = limit if bool(same.all()) else int(same.to(torch.uint8).argmin())
        if shared < min_shared:
            continue
        for r in members:
            group_of[r] = len(prefix_lens)
        prefix_lens.append(shared)
    if not prefix_lens:
        return None
    device = index.device
    return torch.tensor(group_of, device=device), torch.tensor(prefix_lens, dtype=torch.long, device=device)
