"""SGLang's /generate stream: SSE events ``data: {"text", "output_ids", "meta_info"}`` whose text and
ids are CUMULATIVE (SGLang's client slices off what it already has), then ``data: [DONE]``.

In a batch (several prompts, or n > 1) the requests run together and their events interleave as
they arrive, each tagged with ``index`` (its place in the answer list), as SGLang does. A request
the engine aborts sends one error event ``{"error": {...}, "index"}``; the others go on.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable, Sequence

from . import openai_protocol as proto
from .sglang_meta import LogprobOptions, final_meta, partial_meta

__all__ = ["sglang_events"]


async def _merged(calls: Sequence[Any]) -> AsyncIterator[tuple[int, Any]]:
    """(index, chunk) of every call as the chunks arrive. Leaving early stops every reader (whose
    ``achunks`` then cancels its engine request)."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, call: Any) -> None:
        try:
            async for chunk in call.achunks():
                queue.put_nowait((index, chunk))
        finally:
            queue.put_nowait((index, None))

    tasks = [asyncio.ensure_future(pump(i, call)) for i, call in enumerate(calls)]
    try:
        remaining = len(tasks)
        while remaining:
            index, chunk = await queue.get()
            if chunk is None:
                remaining -= 1
                continue
            yield index, chunk
    finally:
        for task in tasks:
            task.cancel()


class _Progress:
    """What one request streamed so far."""

    def __init__(self) -> None:
        self.text = ""
        self.ids: list[int] = []
        self.logprobs: list[float | None] = []
        self.tops: list[Any] = []


async def sglang_events(calls: Sequence[Any], opts: Sequence[LogprobOptions], batch: bool,
                        decode_one: Callable[[int], str], started_at: float) -> AsyncIterator[str]:
    """The SSE strings of one /generate call (`calls` in answer order, `opts` one per call)."""
    progress = [_Progress() for _ in calls]
    async for index, chunk in _merged(calls):
        call, p, tag = calls[index], progress[index], ({"index": index} if batch else {})
        p.text += chunk.text
        p.ids += list(chunk.token_ids)
        p.logprobs += list(chunk.logprobs or [None] * len(chunk.token_ids))
        p.tops += list(chunk.top_logprobs or [None] * len(chunk.token_ids))
        latency = time.monotonic() - started_at
        if chunk.finished:
            out = chunk.output
            if out is None or out.finish_reason.get("type") == "abort":
                message = "the request ended without an output" if out is None else out.finish_reason.get("message")
                yield proto.sse({**proto.error_body(str(message), "server_error"), **tag})
                continue
            meta = final_meta(out, call.rid, opts[index], decode_one, e2e_latency=latency, warnings=call.warnings)
            yield proto.sse({"text": out.text, "output_ids": list(out.token_ids), "meta_info": meta, **tag})
        elif chunk.text:
            meta = partial_meta(call.rid, len(p.ids), opts[index], decode_one, p.ids, p.logprobs, p.tops, latency)
            yield proto.sse({"text": p.text, "output_ids": list(p.ids), "meta_info": meta, **tag})
    yield proto.sse("[DONE]")
