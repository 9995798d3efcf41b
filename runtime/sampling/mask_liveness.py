"""Whether a constraint's bool allowed-token mask allows any token, read once per mask.

Constraint masks are shared, cached tensors (a state's mask comes back step after step), so the
model runner asks here instead of reducing every row's mask every step: a step reduces, in one
stacked read, only the masks it has not seen. Entries hold weak references (a mask dropped by
its grammar's cache is not kept alive here, and a recycled ``id`` is never mistaken for it).
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence

import torch

from .sampler import stack_bool_masks


class MaskLiveness:
    """A bounded memo of "allows some token of the first ``vocab_size`` ids" per mask tensor."""

    def __init__(self, vocab_size: int, device: torch.device | str, max_entries: int = 4096) -> None:
        self.vocab_size = vocab_size
        self.device = device
        self.max_entries = max_entries
        self._seen: OrderedDict[int, tuple[weakref.ref, bool]] = OrderedDict()

    def allow_some(self, masks: Sequence[torch.Tensor]) -> list[bool]:
        """Per bool mask: whether it allows any token id below ``vocab_size``."""
        out: list[bool | None] = []
        fresh: list[int] = []
        for i, m in enumerate(masks):
            hit = self._seen.get(id(m))
            if hit is not None and hit[0]() is m:
                self._seen.move_to_end(id(m))
                out.append(hit[1])
            else:
                out.append(None)
                fresh.append(i)
        if fresh:
            # NOTE: one reduction and one read for every new mask: on a GPU a read waits for it.
            alive = stack_bool_masks([masks[i] for i in fresh], self.vocab_size, self.device).any(dim=1).tolist()
            for i, ok in zip(fresh, alive):
                out[i] = ok
                self._seen[id(masks[i])] = (weakref.ref(masks[i]), ok)
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)
        return out  # type: ignore[return-value]
