"""The interface every execution backend implements (srt over gRPC, in-process engine, openai).

The executor owns program semantics (streams, roles, variables, select normalization); a backend
only answers model questions about a prompt. Backends must be safe to call from many threads.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Optional

from sglc.wire import sampling_table
from sglc.wire.chat_template import ChatTemplate


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    model: str
    context_length: int
    chat_template: Optional[ChatTemplate]
    supports_images: bool = False


@dataclasses.dataclass
class Prompt:
    """What the model sees: the stream's text, and the same content as chat messages."""

    text: str
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    images: list[str] = dataclasses.field(default_factory=list)


_FIELD_TYPES = {"int": Optional[int], "float": Optional[float], "bool": Optional[bool],
                "str_list": Optional[list[str]], "token_ids": Optional[list[int]]}

#: Sampling parameters of one gen (None = the backend's default) and its constraint. The
#: sampling fields are the table's (sglc.wire.sampling_table.GEN_FIELDS, by name:
#: ``max_new_tokens``); at most one constraint: a regex, a JSON schema (JSON text) or a
#: compiled FSM (dict form).
GenParams = dataclasses.make_dataclass(
    "GenParams",
    [*((p.name, _FIELD_TYPES[p.kind], dataclasses.field(default=None)) for p in sampling_table.GEN_FIELDS.values()),
     ("regex", Optional[str], dataclasses.field(default=None)),
     ("json_schema", Optional[str], dataclasses.field(default=None)),
     ("fsm", Optional[dict], dataclasses.field(default=None))],
    namespace={"__module__": __name__, "__doc__": "Sampling parameters of one gen (None = the backend's default) "
                                                   "and its constraint; fields from sglc.wire.sampling_table."},
)


@dataclasses.dataclass
class CallMeta:
    """Per-call facts recorded in results: token counts, cache hits, time."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: Optional[dict] = None
    latency_s: float = 0.0


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

    def generate_stream(self, prompt: Prompt, params: GenParams, on_text: Callable[[str], None]) -> GenResult:
        """`generate`, handing the text to `on_text` piece by piece as it is produced (the
        streaming of `run(stream=True)`). This default hands over the whole text at the end."""
        result = self.generate(prompt, params)
        on_text(result.text)
        return result

    def metrics(self) -> dict[str, Any]:
        return {}

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
