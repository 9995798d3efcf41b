"""The interface every execution backend implements (srt over gRPC, in-process engine, openai).

The executor owns program semantics (streams, roles, variables, select normalization); a backend
only answers model questions about a prompt. Backends must be safe to call from many threads.
"""
from __future__ import annotations

import abc
import dataclasses
import threading
from typing import Any, Callable, Optional, Sequence

from sglc.wire import sampling_table
from sglc.wire.chat_template import ChatTemplate
from sglc.wire.program_hint import ProgramHint


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    model: str
    context_length: int
    chat_template: Optional[ChatTemplate]
    supports_images: bool = False


@dataclasses.dataclass
class Prompt:
    """What the model sees: the stream's text, and the same content as chat messages.

    ``hint`` is not something the model sees: the call's place in its program (issue 28,
    sglc.wire.program_hint), for backends that pass it on (srt, the embedded engine, SGLang-wire
    /generate); others ignore it. It never changes a call's result."""

    text: str
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    images: list[str] = dataclasses.field(default_factory=list)
    hint: Optional[ProgramHint] = None


_FIELD_TYPES = {"int": Optional[int], "float": Optional[float], "bool": Optional[bool],
                "str_list": Optional[list[str]], "token_ids": Optional[list[int]]}

#: Sampling parameters of one gen (None = the backend's default) and its constraint. The
#: sampling fields are the table's (sglc.wire.sampling_table.GEN_FIELDS, by name:
#: ``max_new_tokens``); at most one constraint: a regex, a JSON schema (JSON text), a
#: compiled FSM (dict form) or a context-free grammar (``ebnf``: GBNF/EBNF text, what a lowered
#: ``grammar`` prints as; ConstraintSpec kind "ebnf"). ``ebnf_from_json_schema`` is no
#: constraint of its own: beside ``ebnf``, the JSON schema text that grammar was lowered from (a
#: recursive schema), for backends that take a JSON schema but no grammar (OpenAI's
#: response_format).
GenParams = dataclasses.make_dataclass(
    "GenParams",
    [*((p.name, _FIELD_TYPES[p.kind], dataclasses.field(default=None)) for p in sampling_table.GEN_FIELDS.values()),
     ("regex", Optional[str], dataclasses.field(default=None)),
     ("json_schema", Optional[str], dataclasses.field(default=None)),
     ("fsm", Optional[dict], dataclasses.field(default=None)),
     ("ebnf", Optional[str], dataclasses.field(default=None)),
     ("ebnf_from_json_schema", Optional[str], dataclasses.field(default=None)),
     # NOTE: what a gen asks back besides its text (gen(return_logprob=True, top_logprobs_num=k,
     # logprob_start_len=n)): a LogprobRequest, or None for no logprobs.
     ("logprobs", Optional["LogprobRequest"], dataclasses.field(default=None))],
    namespace={"__module__": __name__, "__doc__": "Sampling parameters of one gen (None = the backend's default), "
                                                   "its constraint and its logprob request; fields from "
                                                   "sglc.wire.sampling_table."},
)


@dataclasses.dataclass(frozen=True)
class LogprobRequest:
    """The logprobs a gen asks for (SGLang's gen(return_logprob=True, top_logprobs_num=k,
    logprob_start_len=n)): the output tokens' logprobs, the k most likely alternatives at each
    output position, and the prompt tokens' logprobs from position n (-1: none)."""

    top_logprobs_num: int = 0
    logprob_start_len: int = -1


def logprob_meta(output_ids: Sequence[int], output_logprobs: Optional[Sequence[Optional[float]]],
                 output_top: Optional[Sequence[Any]] = None, input_logprobs: Optional[Sequence[Optional[float]]] = None,
                 input_ids: Optional[Sequence[int]] = None, top_logprobs_num: int = 0) -> dict[str, Any]:
    """SGLang's logprob keys of a gen's meta_info, from what a backend got back.

    ``output_token_logprobs``: ``[logprob, token_id, None]`` per output token (SGLang's triples;
    the text is None, as without return_text_in_logprobs); ``output_top_logprobs`` (when
    ``top_logprobs_num`` > 0): per output position a list of such triples, or None where the token
    was forced by a constraint; ``input_token_logprobs``: the prompt's, from logprob_start_len
    (a token id None where the backend did not say). ``output_top`` rows are (token_id, logprob) pairs.
    """
    def triple(value: Optional[float], token: Optional[int]) -> list:
        return [None if value is None or value != value else float(value), None if token is None else int(token), None]

    meta: dict[str, Any] = {
        "output_token_logprobs": [triple(v, t) for v, t in zip(output_logprobs or [], output_ids)],
        "input_token_logprobs": [triple(v, input_ids[i] if input_ids is not None and i < len(input_ids) else None)
                                 for i, v in enumerate(input_logprobs or [])],
    }
    if top_logprobs_num > 0:
        meta["output_top_logprobs"] = [None if row is None else [triple(v, t) for t, v in row] for row in output_top or []]
        meta["input_top_logprobs"] = []
    return meta


@dataclasses.dataclass
class CallMeta:
    """Per-call facts recorded in results: token counts, cache hits, time."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: Optional[dict] = None
    latency_s: float = 0.0
    #: SGLang's logprob keys (:func:`logprob_meta`) when the gen asked for logprobs, else None.
    logprobs: Optional[dict[str, Any]] = None


@dataclasses.dataclass
class TokenUsage:
    """Tokens a backend has used (SGLang's ``backend.token_usage``): prompt and completion tokens
    of every gen and select since the last ``reset()``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def reset(self) -> None:
        self.prompt_tokens = self.completion_tokens = 0


@dataclasses.dataclass
class GenResult:
    text: str
    meta: CallMeta


@dataclasses.dataclass
class ChoiceLogprobs:
    """Log-probabilities of one choice's tokens after the prompt (and without it, if asked)."""

    token_logprobs: list[float]
    #: Logprobs of the choice's tokens with an empty prompt, for unconditional normalization.
    unconditional_logprobs: Optional[list[float]] = None


@dataclasses.dataclass
class ScoreResult:
    choices: list[ChoiceLogprobs]
    meta: CallMeta


_USAGE_LOCK = threading.Lock()


class Backend(abc.ABC):
    """A model endpoint as the executor sees it."""

    @abc.abstractmethod
    def model_info(self) -> ModelInfo: ...

    @abc.abstractmethod
    def generate(self, prompt: Prompt, params: GenParams) -> GenResult: ...

    @abc.abstractmethod
    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        """Logprobs of each choice as a continuation of `prompt` (one batched call)."""

    @abc.abstractmethod
    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        """Hint: prefill `prompt` now and keep it cached (forks and batches share it)."""

    def generate_stream(self, prompt: Prompt, params: GenParams, on_text: Callable[..., None]) -> GenResult:
        """`generate`, handing the text to `on_text` piece by piece as it is produced (the
        streaming of `run(stream=True)`). This default hands over the whole text at the end.

        A backend that knows each piece's tokens calls ``on_text(piece, meta)`` with SGLang's
        per-chunk meta (``completion_tokens`` so far and, when asked, the piece's
        ``output_token_logprobs``); ``on_text(piece)`` otherwise."""
        result = self.generate(prompt, params)
        on_text(result.text)
        return result

    def end_program(self, program_id: str) -> int:
        """A program run ended: the runtime may drop what it keeps for its hints. Returns the
        cached tokens released (0 for backends that take no hints). Advice only: never raises
        for a runtime that is gone (a hint cannot fail a program)."""
        return 0

    def metrics(self) -> dict[str, Any]:
        return {}

    # ----- SGLang's backend attributes -----
    @property
    def token_usage(self) -> TokenUsage:
        """Prompt and completion tokens of the calls made through this backend (SGLang's
        ``backend.token_usage``; ``.reset()`` zeroes it). The executor adds each call's counts."""
        with _USAGE_LOCK:
            usage = self.__dict__.get("_token_usage")
            if usage is None:
                usage = self.__dict__["_token_usage"] = TokenUsage()
            return usage

    def add_token_usage(self, meta: CallMeta) -> None:
        """Count one call's tokens in :attr:`token_usage` (thread-safe)."""
        usage = self.token_usage
        with _USAGE_LOCK:
            usage.prompt_tokens += meta.prompt_tokens
            usage.completion_tokens += meta.completion_tokens

    def get_model_name(self) -> str:
        """The model this backend runs (SGLang's ``backend.get_model_name()``)."""
        return self.model_info().model

    def flush_cache(self) -> bool:
        """Empty the prefix cache; False when this backend cannot (or not now: requests in flight)."""
        return False

    def get_server_info(self) -> dict[str, Any]:
        """SGLang backends' `get_server_info()` (what `sgl.get_server_info()` returns): model facts and metrics."""
        info = self.model_info()
        return {"model_path": info.model, "context_length": info.context_length,
                "supports_images": info.supports_images, **self.metrics()}

    def close(self) -> None:
        return None
