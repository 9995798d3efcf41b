"""Values both sides of runtime.proto spell the same way: enum <-> name tables and logprob lists.

Used by :mod:`sglc.wire.server_convert` and :mod:`sglc.wire.client_convert`; torch-free.
"""
from __future__ import annotations

import math
from typing import Sequence

from sglc.wire.proto import runtime_pb2 as pb

IMAGE_MODES = {pb.IMAGE_MODE_REJECT: "reject", pb.IMAGE_MODE_PLACEHOLDER: "placeholder"}
IMAGE_MODE_PB = {v: k for k, v in IMAGE_MODES.items()}
FINISH = {"stop": pb.FinishReason.STOP, "length": pb.FinishReason.LENGTH, "abort": pb.FinishReason.ABORT}
FINISH_NAME = {v: k for k, v in FINISH.items()}
ERROR_CODE = {"internal": pb.GenerateError.INTERNAL, "aborted": pb.GenerateError.ABORTED,
              "unavailable": pb.GenerateError.UNAVAILABLE}
HEALTH = {"serving": pb.HealthResponse.SERVING, "not_serving": pb.HealthResponse.NOT_SERVING,
          "draining": pb.HealthResponse.DRAINING}


def floats(values: Sequence[float | None] | None) -> list[float]:
    """Python logprobs -> proto doubles (None -> NaN)."""
    return [math.nan if v is None else float(v) for v in values or ()]


def tops(tops: Sequence[Sequence[tuple[int, float]]] | None) -> list[pb.TopLogprobs]:
    return [pb.TopLogprobs(token_ids=[int(t) for t, _ in row], logprobs=[float(v) for _, v in row])
            for row in tops or ()]


