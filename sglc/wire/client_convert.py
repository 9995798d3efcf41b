"""runtime.proto <-> the executor's backend types, client side (used by
sglc.executor.backends.srt): Prompt, GenParams -> requests; responses -> GenResult, ScoreResult,
ModelInfo.

The server's side is :mod:`sglc.wire.server_convert`. Torch-free and runtime-free.
"""
from __future__ import annotations

from typing import Any, Sequence

from sglc.wire import backend as bk
from sglc.wire import pb_values as pbv
from sglc.wire import sampling_table
from sglc.wire.chat_template import ChatTemplate
from sglc.wire.fsm_message import fsm_to_pb
from sglc.wire.json_schema_text import schema_text
from sglc.wire.proto import runtime_pb2 as pb


def prompt_to_pb(prompt: bk.Prompt | str, image_mode: str = "reject") -> pb.Prompt:
    if isinstance(prompt, str):
        return pb.Prompt(text=prompt)
    if image_mode not in pbv.IMAGE_MODE_PB:
        raise ValueError(f"image_mode must be one of {tuple(pbv.IMAGE_MODE_PB)}, got {image_mode!r}")
    return pb.Prompt(text=prompt.text, images=list(prompt.images), image_mode=pbv.IMAGE_MODE_PB[image_mode])


def gen_params_to_pb(params: bk.GenParams) -> pb.SamplingParams:
    """GenParams (None = the runtime's default) as SamplingParams (the table's proto spellings)."""
    s = pb.SamplingParams()
    values = sampling_table.set_fields(params)
    for name, value in values.items():
        row = sampling_table.BY_NAME[name]
        if row.kind == "str_list":
            getattr(s, row.proto).extend([value] if isinstance(value, str) else value)
        elif row.kind == "token_ids":
            getattr(s, row.proto).extend(value)
        else:
            setattr(s, row.proto, value)
    sampling_table.at_most_one_constraint({n: getattr(params, n) for n in ("regex", "json_schema", "fsm", "ebnf")})
    if params.regex is not None:
        s.regex = params.regex
    elif params.json_schema is not None:
        s.json_schema = schema_text(params.json_schema)
    elif params.fsm is not None:
        s.fsm.CopyFrom(fsm_to_pb(params.fsm))
    elif params.ebnf is not None:  # NOTE: a grammar travels as text; the runtime parses it (issue 27)
        if not isinstance(params.ebnf, str):
            raise TypeError(f"ebnf must be GBNF/EBNF grammar text (a str), got {type(params.ebnf).__name__}")
        s.ebnf = params.ebnf
    return s


def set_hint(request: pb.GenerateRequest | pb.ScoreRequest | pb.CachePrefixRequest, prompt: bk.Prompt | str) -> None:
    """The prompt's program hint (issue 28) on `request.hint`; left unset when there is none."""
    hint = getattr(prompt, "hint", None)
    if hint is not None:
        hint.to_pb(request.hint)


def generate_request(prompt: bk.Prompt | str, params: bk.GenParams, *, rid: str = "", stream: bool = False,
                     image_mode: str = "reject") -> pb.GenerateRequest:
    request = pb.GenerateRequest(rid=rid, prompt=prompt_to_pb(prompt, image_mode),
                                 sampling=gen_params_to_pb(params), stream=stream)
    set_hint(request, prompt)
    asked = params.logprobs
    if asked is not None:
        request.logprobs.return_logprob = True
        request.logprobs.top_logprobs_num = asked.top_logprobs_num
        if asked.logprob_start_len >= 0:
            request.logprobs.logprob_start_len = asked.logprob_start_len
    return request


def score_request(prompt: bk.Prompt | str, choices: Sequence[str], unconditional: bool = False,
                  image_mode: str = "reject") -> pb.ScoreRequest:
    request = pb.ScoreRequest(prompt=prompt_to_pb(prompt, image_mode), choices=list(choices),
                              unconditional=unconditional)
    set_hint(request, prompt)
    return request


def cache_prefix_request(prompt: bk.Prompt | str, image_mode: str = "reject") -> pb.CachePrefixRequest:
    request = pb.CachePrefixRequest(prompt=prompt_to_pb(prompt, image_mode))
    set_hint(request, prompt)
    return request


def _top_rows(rows: Sequence[pb.TopLogprobs]) -> list:
    return [list(zip(row.token_ids, row.logprobs)) for row in rows]


def chunk_meta(chunk: pb.GenerateChunk, completion_tokens: int, params: bk.GenParams) -> dict[str, Any]:
    """SGLang's meta of one streamed chunk: ``completion_tokens`` so far and, when the gen asked
    for logprobs, the chunk's own ``output_token_logprobs`` (``output_token_logprobs_length``: so far)."""
    meta: dict[str, Any] = {"completion_tokens": completion_tokens}
    if params.logprobs is not None:
        meta.update(bk.logprob_meta(list(chunk.token_ids), list(chunk.logprobs), _top_rows(chunk.top_logprobs),
                                    top_logprobs_num=params.logprobs.top_logprobs_num))
        meta.pop("input_token_logprobs", None)
        meta.pop("input_top_logprobs", None)
        meta["output_token_logprobs_length"] = completion_tokens
    return meta


def finish_reason_from_pb(msg: pb.FinishReason) -> dict | None:
    name = pbv.FINISH_NAME.get(msg.type)
    if name is None:
        return None
    out: dict[str, Any] = {"type": name}
    which = msg.WhichOneof("matched")
    if name == "stop":
        out["matched"] = getattr(msg, which) if which else None
    elif name == "length":
        out["length"] = msg.length
    else:
        out["message"] = msg.message
    return out


def call_meta(prompt_tokens: int, cached_tokens: int, completion_tokens: int = 0,
              finish_reason: dict | None = None, latency_s: float = 0.0, warnings: Sequence[str] = ()) -> bk.CallMeta:
    meta = bk.CallMeta(prompt_tokens=prompt_tokens, cached_tokens=cached_tokens,
                       completion_tokens=completion_tokens, finish_reason=finish_reason, latency_s=latency_s)
    if warnings:  # NOTE: CallMeta has no field for them yet; kept as an extra attribute
        meta.warnings = list(warnings)  # type: ignore[attr-defined]
    return meta


def gen_result_from_pb(msg: pb.GenerateComplete, latency_s: float, params: bk.GenParams | None = None) -> bk.GenResult:
    meta = call_meta(msg.prompt_tokens, msg.cached_tokens, msg.completion_tokens,
                     finish_reason_from_pb(msg.finish_reason), latency_s, msg.warnings)
    if params is not None and params.logprobs is not None:
        meta.logprobs = bk.logprob_meta(list(msg.output_ids), list(msg.output_logprobs),
                                        _top_rows(msg.output_top_logprobs), list(msg.input_logprobs), None,
                                        params.logprobs.top_logprobs_num)
    return bk.GenResult(text=msg.text, meta=meta)


def score_result_from_pb(msg: pb.ScoreResponse, latency_s: float, unconditional: bool) -> bk.ScoreResult:
    choices = [bk.ChoiceLogprobs(token_logprobs=list(c.token_logprobs),
                                 unconditional_logprobs=list(c.unconditional_logprobs) if unconditional else None)
               for c in msg.choices]
    return bk.ScoreResult(choices=choices, meta=call_meta(msg.prompt_tokens, msg.cached_tokens,
                                                          latency_s=latency_s, warnings=msg.warnings))


def model_info_from_pb(msg: pb.ModelInfoResponse) -> bk.ModelInfo:
    template = None
    if msg.HasField("chat_template"):
        t = msg.chat_template
        template = ChatTemplate(role_prefix=dict(t.role_prefix), role_suffix=dict(t.role_suffix),
                                   generation_prefix=t.generation_prefix)
    return bk.ModelInfo(model=msg.model_name, context_length=msg.context_length, chat_template=template,
                        supports_images=msg.supports_images)


def metrics_from_pb(msg: pb.MetricsResponse) -> dict[str, Any]:
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields}
