"""Precompute (issue 28): a program's next prompt prefilled as soon as the call before it ends.

A gen's hint may carry its continuation (sglc.wire.program_hint, sglc/executor/continuation.py):
the text the program appends after the gen's output before its next call. The next call's prompt
then starts with prompt + output + continuation, all known to the runtime the moment the gen
ends. Both engines queue that text as a prefill-only request of the same program right then, so
its K/V are computed while the result travels back, the executor builds the next prompt and sends
it; the next call finds them in the radix cache. The text is tokenized exactly as the next call's
prompt will be (the whole string, not output tokens + continuation tokens), so the cache holds
the ids that call looks up.

It pays where the executor is far from the engine: on the 2-core CPU of docs/benchmarks.md, with
a 200 ms round trip and ~150-token user turns, a lone conversation's latency fell 18%; embedded, or
at 50 ms, it is within noise (the prefill it moves is the same work, and the window it can hide in
is the round trip).

Safety: a precompute is an ordinary prefill-only call of the program (its slots reserved and
released as any call's, admitted by the same rules, so memory goes where it would have gone a
few milliseconds later); its K/V are the model's for its own tokens, so a cache hit on them never
changes an output, and a wrong guess costs one prefill of at most the continuation's length
(``MAX_CONTINUATION_CHARS``). A precompute not started when the program's next call (or its end)
arrives is withdrawn: the call does the work itself. Only text prompts are precomputed (a prompt
sent as token ids has no text to extend), and only after a call that ended normally.
"""
from __future__ import annotations

from typing import Any, Callable

from sglc.wire.program_hint import ProgramHint

from .prompt_ids import Prompt, to_token_ids

#: Weight of the newest step in an engine's mean step time (how long a precompute is held on an
#: idle engine), and the mean before any step (seconds).
STEP_EWMA, FIRST_STEP_S = 0.2, 0.02
EARLY_S = 0.001
#: Request ids of precomputes (never a client's: a client id with this prefix is refused).
RID_PREFIX = "sglc-precompute/"


def next_prompt_ids(prompt: Prompt, output_text: str, hint: ProgramHint | None, tokenizer, vocab_size: int,
                    max_context: int) -> list[int] | None:
    """The token ids the program's next call starts with, or None when there is nothing to
    precompute: no continuation, a prompt of token ids, or a text past the context."""
    if hint is None or not hint.continuation or not isinstance(prompt, str):
        return None
    ids = to_token_ids(prompt + output_text + hint.continuation, tokenizer, vocab_size)
    return ids if len(ids) + 1 <= max_context else None


def check_client_rid(rid: str | None) -> None:
    """ValueError for a client's request id that would pass for a precompute's."""
    if isinstance(rid, str) and rid.startswith(RID_PREFIX):
        raise ValueError(f"request ids starting with {RID_PREFIX!r} are the runtime's own (precompute)")


def discard_output(chunk: object) -> None:
    """A precompute's output callback: nobody reads it (its work is the K/V it leaves cached)."""


def precompute_hint(hint: ProgramHint) -> ProgramHint:
    """The precompute's own hint: the program's, its text read by the next call at once."""
    return ProgramHint(hint.program_id, 0, hint.lease_ms)


class Precomputes:
    """The precomputes not finished, at most one per program (a newer one replaces it).

    A precompute is *held* first: the engine takes it into its queue (``due``) at once when it
    is stepping other requests anyway (the prefill rides along in a step that runs regardless),
    or once it has been held for ``grace`` seconds (about one step) while the engine idles: an
    idle engine would otherwise spend a step of its own on it, and an executor that answers
    within a step sends the next call first (it does the work itself, in the step that samples).
    On the embedded engine a lone program's next call always came first (bench_precompute.py:
    every precompute withdrawn). The program's next call, or its end, withdraws its precompute
    while it is held or queued; once admitted it runs to its end. The table holds no reference
    to its engine (a stored callback made every engine a reference cycle).
    """

    def __init__(self) -> None:
        self.step_s = FIRST_STEP_S  # NOTE: the engine's recent steps' mean time: how long one is held
        self._held: dict[str, tuple[str, Any, float]] = {}  # program id -> (rid, request, when held)
        self._queued: dict[str, str] = {}  # program id -> rid, in the engine's queue
        self._seq = 0
        self.counts = dict(submitted=0, withdrawn=0)

    def new_rid(self, program_id: str) -> str:
        self._seq += 1
        return f"{RID_PREFIX}{self._seq}/{program_id}"

    def hold(self, program_id: str, rid: str, request: Any, now: float) -> None:
        """Hold ``request`` (id ``rid``) for ``program_id`` (the engine claims an older one first)."""
        self._held[program_id] = (rid, request, now)
        self.counts["submitted"] += 1

    def observe_step(self, seconds: float) -> None:
        """The engine ran a step that took ``seconds`` (a held precompute waits about one)."""
        self.step_s += STEP_EWMA * (seconds - self.step_s)

    def due(self, now: float, busy: bool) -> list[Any]:
        """The held requests to queue now: all while ``busy``, else those held about a step."""
        grace = self.step_s
        # NOTE: a timed wait may wake a hair early: that counts as due, not as another wait
        ready = [p for p, (_, _, t) in self._held.items() if busy or now - t >= grace - EARLY_S]
        out = []
        for program_id in ready:
            rid, request, _ = self._held.pop(program_id)
            self._queued[program_id] = rid
            out.append(request)
        return out

    def wait_s(self, now: float) -> float | None:
        """Seconds until the next held request is due on an idle engine; None when none is held."""
        if not self._held:
            return None
        return max(0.0, min(t for _, _, t in self._held.values()) + self.step_s - now)

    @property
    def num_held(self) -> int:
        return len(self._held)

    @property
    def num_pending(self) -> int:
        """Precomputes not finished: held, queued or running."""
        return len(self._held) + len(self._queued)

    def claim(self, program_id: str, withdraw: Callable[[str], bool]) -> None:
        """The program's next call (or its end) arrived: its precompute goes if it has not started:
        a held one here, a queued one by ``withdraw(rid)`` (the engine's: drops it from its queue,
        False if it has started). The engine passes ``withdraw`` per call: the table keeps no
        reference to it."""
        if self._held.pop(program_id, None) is not None:
            self.counts["withdrawn"] += 1
            return
        rid = self._queued.pop(program_id, None)
        if rid is not None and withdraw(rid):
            self.counts["withdrawn"] += 1

    def done(self, rid: str) -> None:
        """Request ``rid`` ended (any request may be passed): nothing is left to withdraw."""
        if rid.startswith(RID_PREFIX):
            program_id = rid.split("/", 2)[2]
            if self._queued.get(program_id) == rid:
                del self._queued[program_id]
