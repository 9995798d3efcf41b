"""SGLang's /generate request (its ``GenerateReqInput`` and ``sampling_params``) as pydantic models.

SGLang's client (``sglang.RuntimeEndpoint``) and sglang-router send this wire format; every field
SGLang defines is spelled here once, with its default. Three kinds of fields:

- honoured: mapped onto our SamplingParams / the handler (``to_engine_fields``);
- harmless no-ops: accepted with any value because they cannot change results here
  (``stream_interval``, ``log_metrics``; ``spaces_between_special_tokens`` while special tokens
  are skipped);
- not supported: accepted only at SGLang's default (``null`` / ``false`` / empty), because the
  client and the router send them that way on every call; any other value is a 400 naming the
  field (never a silent ignore that would change the answer).

A field SGLang does not define is a 400 too (``extra="forbid"``), as is a value of the wrong type
(``strict``: no "1" for 1, no 0 for false). ``null`` means "SGLang's default" for every field, as
in SGLang. sglc's own extensions: ``sampling_params.fsm`` and the top-level ``program_hint``
(issue 28: ``{"program_id", "next_use", "lease_ms"}``, sglc.wire.program_hint; once for the whole
call or one per prompt of a batch).
"""
from __future__ import annotations

from typing import Any, Union

from pydantic import BaseModel

from sglc.wire import sampling_table

from .request_model import STRICT as _STRICT, FieldError, is_default as _is_default, parse_model as _parse_model
from .request_model import sampling_model

__all__ = ["API", "FieldError", "SglangGenerateRequest", "SglangSamplingParams", "parse_model"]

#: How errors name this request.
API = "SGLang's /generate request"


class SglangSamplingParams(sampling_model("_SglangSampling", sampling_table.BY_SGLANG, with_defaults=True)):
    """One prompt's ``sampling_params`` object (SGLang's SamplingParams API fields): the sampling
    table's ``sglang`` column (its defaults are SGLang's), plus the fields below."""

    model_config = _STRICT

    n: int | None = 1
    spaces_between_special_tokens: bool | None = True
    regex: str | None = None
    json_schema: Union[str, dict, None] = None
    #: sglc's extension: a constraint already lowered by `sglc compile` (sglc.fsm's dict form), so a
    #: graph's constrained gen is not recompiled from its regex. SGLang servers do not take it.
    fsm: dict | None = None
    #: A GBNF/EBNF grammar the output matches (SGLang's field; compiled by sglc.grammar).
    ebnf: str | None = None
    # NOTE: a no-op here: it only sets how often SGLang flushes stream chunks.
    stream_interval: int | None = None
    # Not supported: only SGLang's default (null) is accepted.
    structural_tag: Any = None
    beam_width: Any = None
    logit_bias: Any = None
    custom_params: Any = None
    watermark: Any = None

    def refusal(self, where: str = "sampling_params") -> FieldError | None:
        """Why this server cannot honour these parameters (naming the field), or None."""
        for name in ("structural_tag", "beam_width", "logit_bias", "custom_params", "watermark"):
            if getattr(self, name) not in (None, {}, []):
                return FieldError(f"{where}.{name}", f"'{where}.{name}' is not supported by this server "
                                                     "(only null is accepted)")
        if self.spaces_between_special_tokens is False and self.skip_special_tokens is False:
            return FieldError(f"{where}.spaces_between_special_tokens",
                              f"'{where}.spaces_between_special_tokens': false is not supported together with "
                              "skip_special_tokens=false (special tokens are decoded as the tokenizer joins them)")
        if self.n is not None and self.n < 1:
            return FieldError(f"{where}.n", f"'{where}.n' must be >= 1, got {self.n}")
        if self.max_new_tokens is None:
            return FieldError(f"{where}.max_new_tokens", f"'{where}.max_new_tokens': null (generate up to the "
                                                         "context) is not supported; give a number")
        return None

    @property
    def num_samples(self) -> int:
        return 1 if self.n is None else self.n

    def to_engine_fields(self) -> dict[str, Any]:
        """Keyword fields of our SamplingParams (SGLang's meaning; null = the default)."""
        fields: dict[str, Any] = {}
        for key, row in sampling_table.BY_SGLANG.items():
            value = getattr(self, key)
            # NOTE: SGLang's client sends [] for "no stop strings"
            if value is not None and not (row.kind in ("str_list", "token_ids") and not value):
                fields[row.name] = list(value) if row.kind == "token_ids" else value
        for name in ("regex", "json_schema", "fsm", "ebnf"):
            if getattr(self, name) is not None:
                fields[name] = getattr(self, name)
        return fields


#: Top-level GenerateReqInput fields this server does not implement: accepted at null / false /
#: empty only (SGLang's client and sglang-router send some of them with those values).
UNSUPPORTED_REQUEST_FIELDS = (
    "session_id", "input_embeds", "video_data", "audio_data", "mm_hashes", "mm_content_hashes", "video_config",
    "token_ids_logprob", "return_sampling_mask", "sampling_logprobs_mode", "return_flat_raw_top_logprobs",
    "return_flat_raw_output_top_logprobs", "return_hidden_states", "return_routed_experts", "return_indexer_topk",
    "modalities", "session_params", "lora_path", "lora_id", "custom_logit_processor", "positional_embed_overrides",
    "bootstrap_host", "bootstrap_port", "bootstrap_room", "bootstrap_pair_key", "decode_tp_size",
    "background", "require_reasoning", "watermark", "extra_key", "return_bytes", "return_entropy", "priority",
)


class SglangGenerateRequest(BaseModel):
    """The body of POST /generate (SGLang's GenerateReqInput). ``text`` / ``input_ids`` /
    ``sampling_params`` keep their JSON form here: their batch shapes are checked by
    openai_protocol.generate_prompts / generate_sampling, whose messages name the item."""

    model_config = _STRICT

    text: Any = None
    input_ids: Any = None
    sampling_params: Any = None
    rid: Union[str, list[str], None] = None
    return_logprob: Union[bool, list[bool], None] = None
    logprob_start_len: Union[int, list[int], None] = None
    top_logprobs_num: Union[int, list[int], None] = None
    return_text_in_logprobs: bool | None = False
    stream: bool | None = False
    image_data: Any = None
    #: sglc's extension (issue 28): the call's place in its program, ``{"program_id", "next_use",
    #: "lease_ms"}`` (ProgramHint.from_json checks it: unknown keys, types and ranges are 400s
    #: naming ``program_hint``); one object for every prompt (and sample) of the call, or a list
    #: with one object (or null) per prompt of a batch. SGLang servers do not take it, and
    #: sglang-router 0.3.2 drops it (docs/sglang_server.md).
    program_hint: Union[dict, list, None] = None
    # No-ops here: metrics are always kept; routing hints matter to the router, not to a worker.
    log_metrics: bool | None = True
    #: sglang-router 0.3.2 forwards its own GenerateRequest: these come with every call (null when
    #: unset). model: what it routed by; no_logs / custom_labels: its logging and metric labels.
    model: str | None = None
    no_logs: bool | None = None
    custom_labels: dict | None = None
    routed_dp_rank: int | None = None
    data_parallel_rank: int | None = None
    disagg_prefill_dp_rank: int | None = None
    routing_key: str | None = None
    conversation_id: str | None = None
    use_audio_in_video: bool | None = False
    routed_experts_start_len: int | None = 0
    http_worker_ipc: Any = None
    # Not supported (see UNSUPPORTED_REQUEST_FIELDS): only null / false / empty.
    session_id: Any = None
    input_embeds: Any = None
    video_data: Any = None
    audio_data: Any = None
    mm_hashes: Any = None
    mm_content_hashes: Any = None
    video_config: Any = None
    token_ids_logprob: Any = None
    return_sampling_mask: Any = None
    sampling_logprobs_mode: Any = None
    return_flat_raw_top_logprobs: Any = None
    return_flat_raw_output_top_logprobs: Any = None
    return_hidden_states: Any = None
    return_routed_experts: Any = None
    return_indexer_topk: Any = None
    modalities: Any = None
    session_params: Any = None
    lora_path: Any = None
    lora_id: Any = None
    custom_logit_processor: Any = None
    positional_embed_overrides: Any = None
    bootstrap_host: Any = None
    bootstrap_port: Any = None
    bootstrap_room: Any = None
    bootstrap_pair_key: Any = None
    decode_tp_size: Any = None
    background: Any = None
    require_reasoning: Any = None
    watermark: Any = None
    extra_key: Any = None
    return_bytes: Any = None
    return_entropy: Any = None
    priority: Any = None

    def refusal(self) -> FieldError | None:
        """Why this server cannot honour the request (naming the field), or None."""
        for name in UNSUPPORTED_REQUEST_FIELDS:
            value = getattr(self, name)
            if not _is_default(value):
                return FieldError(name, f"'{name}' is not supported by this server (only null is accepted)")
        if not _is_default(self.image_data):
            return FieldError("image_data", "'image_data': this server's model is text-only, so images are refused "
                                            "(SGLang programs with sgl.image() need a multimodal SGLang server)")
        return None

    def per_prompt(self, name: str, num_prompts: int, batch: bool) -> list[Any]:
        """A field that SGLang takes either once or as one value per prompt, as a per-prompt list."""
        value = getattr(self, name)
        if isinstance(value, list):
            if not batch or len(value) != num_prompts:
                raise FieldError(name, f"'{name}' is a list of {len(value)} values for {num_prompts} prompt(s); give "
                                   "one value, or one per prompt of a batch")
            return list(value)
        return [value] * num_prompts


def parse_model(model: type[BaseModel], data: Any, where: str = "") -> Any:
    """``model`` validated from `data`; FieldError naming the first bad field otherwise."""
    return _parse_model(model, data, where, API)
