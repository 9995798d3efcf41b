"""The ONE place where runtime.proto messages and Python objects are converted.

Server side: proto requests -> service inputs (PromptInput, SamplingParams fields), engine
outputs -> proto responses. Client side (used by sglc.executor.backends.srt): executor types
(Prompt, GenParams) -> proto requests, proto responses -> GenResult / ScoreResult / ModelInfo.

NOTE: importing this module must not import torch or the engine: the client imports it.
Runtime types are imported inside the server-side functions that need them.
"""
from __future__ import annotations

import json
import math
from typing import Any, Sequence

from sglc.executor import backend as bk
from sglc.proto import runtime_pb2 as pb

from .service import PromptInput, RuntimeModelInfo, ScoreOutcome

_IMAGE_MODES = {pb.IMAGE_MODE_REJECT: "reject", pb.IMAGE_MODE_PLACEHOLDER: "placeholder"}
_IMAGE_MODE_PB = {v: k for k, v in _IMAGE_MODES.items()}
_FINISH = {"stop": pb.FinishReason.STOP, "length": pb.FinishReason.LENGTH, "abort": pb.FinishReason.ABORT}
_FINISH_NAME = {v: k for k, v in _FINISH.items()}
_ERROR_CODE = {"internal": pb.GenerateError.INTERNAL, "aborted": pb.GenerateError.ABORTED,
               "unavailable": pb.GenerateError.UNAVAILABLE}
_HEALTH = {"serving": pb.HealthResponse.SERVING, "not_serving": pb.HealthResponse.NOT_SERVING,
           "draining": pb.HealthResponse.DRAINING}
# SamplingParams fields carried as proto3 `optional` scalars (unset = the engine's default).
_OPTIONAL_SAMPLING = ("max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p",
                      "frequency_penalty", "presence_penalty", "repetition_penalty", "seed", "ignore_eos",
                      "skip_special_tokens")


def _floats(values: Sequence[float | None] | None) -> list[float]:
    """Python logprobs -> proto doubles (None -> NaN)."""
    return [math.nan if v is None else float(v) for v in values or ()]


def _tops(tops: Sequence[Sequence[tuple[int, float]]] | None) -> list[pb.TopLogprobs]:
    return [pb.TopLogprobs(token_ids=[int(t) for t, _ in row], logprobs=[float(v) for _, v in row])
            for row in tops or ()]


# =============================== server side ===============================
def prompt_from_pb(p: pb.Prompt) -> PromptInput:
    which = p.WhichOneof("input")
    return PromptInput(
        text=p.text if which == "text" else None,
        token_ids=list(p.token_ids.ids) if which == "token_ids" else None,
        images=tuple(p.images),
        image_mode=_IMAGE_MODES.get(p.image_mode, f"unknown ({p.image_mode})"),
    )


def sampling_fields_from_pb(req: pb.GenerateRequest) -> dict[str, Any]:
    """Keyword arguments for SamplingParams: only the fields the request sets.

    The constraint becomes ``regex`` / ``json_schema`` (JSON text) / ``fsm`` (a dict); a
    malformed fsm_json raises ValueError.
    """
    s = req.sampling
    fields: dict[str, Any] = {name: getattr(s, name) for name in _OPTIONAL_SAMPLING if s.HasField(name)}
    if s.stop:
        fields["stop"] = list(s.stop)
    if s.stop_token_ids:
        fields["stop_token_ids"] = list(s.stop_token_ids)
    which = s.WhichOneof("constraint")
    if which == "regex":
        fields["regex"] = s.regex
    elif which == "json_schema":
        fields["json_schema"] = s.json_schema
    elif which == "fsm_json":
        try:
            fields["fsm"] = json.loads(s.fsm_json)
        except json.JSONDecodeError as err:
            raise ValueError(f"fsm_json is not valid JSON: {err}") from None
        except RecursionError:
            raise ValueError("fsm_json is nested too deeply to parse") from None
    lp = req.logprobs
    if lp.return_logprob:
        fields["return_logprob"] = True
    if lp.top_logprobs_num:
        fields["top_logprobs_num"] = lp.top_logprobs_num
    if lp.HasField("logprob_start_len"):
        fields["logprob_start_len"] = lp.logprob_start_len
    return fields


def finish_reason_to_pb(reason: dict | None) -> pb.FinishReason:
    reason = reason or {}
    msg = pb.FinishReason(type=_FINISH.get(reason.get("type"), pb.FinishReason.TYPE_UNSPECIFIED))
    matched = reason.get("matched")
    if isinstance(matched, str):
        msg.matched_text = matched
    elif isinstance(matched, int):
        msg.matched_token_id = matched
    if reason.get("length") is not None:
        msg.length = int(reason["length"])
    if reason.get("message") is not None:
        msg.message = str(reason["message"])
    return msg


def chunk_to_pb(rid: str, text: str, token_ids: Sequence[int], logprobs: Sequence[float] | None,
                top_logprobs: Any) -> pb.GenerateResponse:
    return pb.GenerateResponse(rid=rid, chunk=pb.GenerateChunk(
        text=text, token_ids=list(token_ids), logprobs=_floats(logprobs), top_logprobs=_tops(top_logprobs)))


def complete_to_pb(rid: str, out: Any, warnings: Sequence[str] = ()) -> pb.GenerateResponse:
    """A finished engine GenerateOutput as the complete message."""
    return pb.GenerateResponse(rid=rid, complete=pb.GenerateComplete(
        text=out.text, output_ids=list(out.token_ids), prompt_tokens=out.prompt_tokens,
        completion_tokens=out.completion_tokens, cached_tokens=out.cached_tokens,
        finish_reason=finish_reason_to_pb(out.finish_reason), output_logprobs=_floats(out.output_logprobs),
        output_top_logprobs=_tops(out.output_top_logprobs), input_logprobs=_floats(out.input_logprobs),
        warnings=list(warnings)))


def error_to_pb(rid: str, kind: str, message: str) -> pb.GenerateResponse:
    """kind: "internal" | "aborted" | "unavailable" (see service.abort_kind)."""
    code = _ERROR_CODE.get(kind, pb.GenerateError.CODE_UNSPECIFIED)
    return pb.GenerateResponse(rid=rid, error=pb.GenerateError(code=code, message=message))


def score_to_pb(outcome: ScoreOutcome) -> pb.ScoreResponse:
    return pb.ScoreResponse(
        choices=[pb.ChoiceScore(token_ids=c.token_ids, token_logprobs=_floats(c.token_logprobs),
                                greedy_logprobs=_floats(c.greedy_logprobs),
                                unconditional_logprobs=_floats(c.unconditional_logprobs))
                 for c in outcome.choices],
        prompt_tokens=outcome.prompt_tokens, cached_tokens=outcome.cached_tokens, warnings=outcome.warnings)


def model_info_to_pb(info: RuntimeModelInfo) -> pb.ModelInfoResponse:
    msg = pb.ModelInfoResponse(
        model_name=info.model_name, model_path=info.model_path, context_length=info.context_length,
        vocab_size=info.vocab_size, eos_token_ids=list(info.eos_token_ids), dtype=info.dtype,
        supports_images=info.supports_images, jinja_chat_template=info.jinja_chat_template)
    if info.bos_token_id is not None:
        msg.bos_token_id = info.bos_token_id
    if info.chat_template is not None:
        t = info.chat_template
        msg.chat_template.CopyFrom(pb.ChatTemplate(role_prefix=t.role_prefix, role_suffix=t.role_suffix,
                                                   generation_prefix=t.generation_prefix))
    return msg


def health_to_pb(status: str, message: str) -> pb.HealthResponse:
    return pb.HealthResponse(status=_HEALTH.get(status, pb.HealthResponse.STATUS_UNSPECIFIED), message=message)


def metrics_to_pb(metrics: dict[str, Any]) -> pb.MetricsResponse:
    """Copies every key that is a MetricsResponse field (busy_s, uptime_s, counters, ...)."""
    names = {f.name: f for f in pb.MetricsResponse.DESCRIPTOR.fields}
    kwargs = {}
    for key, value in metrics.items():
        f = names.get(key)
        if f is not None:
            kwargs[key] = float(value) if f.type == f.TYPE_DOUBLE else int(value)
    return pb.MetricsResponse(**kwargs)


# =============================== client side ===============================
def prompt_to_pb(prompt: bk.Prompt | str, image_mode: str = "reject") -> pb.Prompt:
    if isinstance(prompt, str):
        return pb.Prompt(text=prompt)
    if image_mode not in _IMAGE_MODE_PB:
        raise ValueError(f"image_mode must be one of {tuple(_IMAGE_MODE_PB)}, got {image_mode!r}")
    return pb.Prompt(text=prompt.text, images=list(prompt.images), image_mode=_IMAGE_MODE_PB[image_mode])


def gen_params_to_pb(params: bk.GenParams) -> pb.SamplingParams:
    """GenParams (None = the runtime's default) as SamplingParams."""
    s = pb.SamplingParams()
    if params.max_tokens is not None:
        s.max_new_tokens = params.max_tokens
    for name in ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                 "ignore_eos", "seed"):
        value = getattr(params, name)
        if value is not None:
            setattr(s, name, value)
    if params.stop is not None:
        s.stop.extend([params.stop] if isinstance(params.stop, str) else params.stop)
    if params.stop_token_ids is not None:
        s.stop_token_ids.extend(params.stop_token_ids)
    given = [n for n in ("regex", "json_schema", "fsm") if getattr(params, n) is not None]
    if len(given) > 1:
        raise ValueError(f"a gen takes at most one constraint, got {', '.join(given)}")
    if params.regex is not None:
        s.regex = params.regex
    elif params.json_schema is not None:
        schema = params.json_schema
        s.json_schema = schema if isinstance(schema, str) else json.dumps(schema)
    elif params.fsm is not None:
        s.fsm_json = json.dumps(params.fsm, separators=(",", ":"))
    return s


def generate_request(prompt: bk.Prompt | str, params: bk.GenParams, *, rid: str = "", stream: bool = False,
                     image_mode: str = "reject") -> pb.GenerateRequest:
    return pb.GenerateRequest(rid=rid, prompt=prompt_to_pb(prompt, image_mode),
                              sampling=gen_params_to_pb(params), stream=stream)


def finish_reason_from_pb(msg: pb.FinishReason) -> dict | None:
    name = _FINISH_NAME.get(msg.type)
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


def gen_result_from_pb(msg: pb.GenerateComplete, latency_s: float) -> bk.GenResult:
    return bk.GenResult(text=msg.text, meta=call_meta(
        msg.prompt_tokens, msg.cached_tokens, msg.completion_tokens, finish_reason_from_pb(msg.finish_reason),
        latency_s, msg.warnings))


def score_result_from_pb(msg: pb.ScoreResponse, latency_s: float, unconditional: bool) -> bk.ScoreResult:
    choices = [bk.ChoiceLogprobs(token_logprobs=list(c.token_logprobs), greedy_logprobs=list(c.greedy_logprobs),
                                 unconditional_logprobs=list(c.unconditional_logprobs) if unconditional else None)
               for c in msg.choices]
    return bk.ScoreResult(choices=choices, meta=call_meta(msg.prompt_tokens, msg.cached_tokens,
                                                          latency_s=latency_s, warnings=msg.warnings))


def model_info_from_pb(msg: pb.ModelInfoResponse) -> bk.ModelInfo:
    template = None
    if msg.HasField("chat_template"):
        t = msg.chat_template
        template = bk.ChatTemplate(role_prefix=dict(t.role_prefix), role_suffix=dict(t.role_suffix),
                                   generation_prefix=t.generation_prefix)
    return bk.ModelInfo(model=msg.model_name, context_length=msg.context_length, chat_template=template,
                        supports_images=msg.supports_images)


def metrics_from_pb(msg: pb.MetricsResponse) -> dict[str, Any]:
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields}
