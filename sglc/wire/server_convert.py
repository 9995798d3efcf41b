"""runtime.proto <-> the runtime service, server side: requests -> service inputs (PromptInput,
SamplingParams fields), engine outputs and service results -> responses.

The executor's side is :mod:`sglc.wire.client_convert`; both read the same tables
(:mod:`sglc.wire.pb_values`). Torch-free: nothing here imports the runtime.
"""
from __future__ import annotations

from typing import Any, Sequence

from sglc.fsm.errors import FSMFormatError
from sglc.wire import pb_values as pbv
from sglc.wire import sampling_table
from sglc.wire.fsm_message import fsm_from_pb
from sglc.wire.program_hint import ProgramHint
from sglc.wire.prompt import PromptInput
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.service_results import RuntimeModelInfo, ScoreOutcome


def prompt_from_pb(p: pb.Prompt) -> PromptInput:
    which = p.WhichOneof("input")
    return PromptInput(
        text=p.text if which == "text" else None,
        token_ids=list(p.token_ids.ids) if which == "token_ids" else None,
        images=tuple(p.images),
        image_mode=pbv.IMAGE_MODES.get(p.image_mode, f"unknown ({p.image_mode})"),
    )


def hint_from_pb(req: Any) -> ProgramHint | None:
    """The ``hint`` of a Generate/Score/CachePrefix request, None when unset; ValueError /
    TypeError naming the bad field (an empty program_id, next_use < -1, ...)."""
    return ProgramHint.from_pb(req.hint) if req.HasField("hint") else None


def sampling_fields_from_pb(req: pb.GenerateRequest) -> dict[str, Any]:
    """Keyword arguments for SamplingParams: only the fields the request sets.

    The constraint becomes ``regex`` / ``json_schema`` (JSON text) / ``fsm`` (the dict form of
    the FSM message) / ``ebnf`` (GBNF/EBNF text); an FSM over the compile budget or malformed
    raises ValueError.
    """
    s = req.sampling
    fields: dict[str, Any] = {}
    for row in sampling_table.PROTO:
        if row.kind in ("str_list", "token_ids"):  # repeated: empty = unset
            if getattr(s, row.proto):
                fields[row.name] = list(getattr(s, row.proto))
        elif s.HasField(row.proto):  # proto3 optional: unset = the runtime's default
            fields[row.name] = getattr(s, row.proto)
    which = s.WhichOneof("constraint")
    if which == "regex":
        fields["regex"] = s.regex
    elif which == "json_schema":
        fields["json_schema"] = s.json_schema
    elif which == "fsm":
        try:  # NOTE: sizes checked against the compile budget before anything is copied
            fields["fsm"] = fsm_from_pb(s.fsm)
        except FSMFormatError as err:
            raise FSMFormatError(f"fsm: {err}") from None
    elif which == "ebnf":  # NOTE: text; the runtime's grammar cache parses it under its budget
        fields["ebnf"] = s.ebnf
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
    msg = pb.FinishReason(type=pbv.FINISH.get(reason.get("type"), pb.FinishReason.TYPE_UNSPECIFIED))
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
        text=text, token_ids=list(token_ids), logprobs=pbv.floats(logprobs), top_logprobs=pbv.tops(top_logprobs)))


def complete_to_pb(rid: str, out: Any, warnings: Sequence[str] = ()) -> pb.GenerateResponse:
    """A finished engine GenerateOutput as the complete message."""
    return pb.GenerateResponse(rid=rid, complete=pb.GenerateComplete(
        text=out.text, output_ids=list(out.token_ids), prompt_tokens=out.prompt_tokens,
        completion_tokens=out.completion_tokens, cached_tokens=out.cached_tokens,
        finish_reason=finish_reason_to_pb(out.finish_reason), output_logprobs=pbv.floats(out.output_logprobs),
        output_top_logprobs=pbv.tops(out.output_top_logprobs), input_logprobs=pbv.floats(out.input_logprobs),
        warnings=list(warnings)))


def error_to_pb(rid: str, kind: str, message: str) -> pb.GenerateResponse:
    """kind: "internal" | "aborted" | "unavailable" (see service.abort_kind)."""
    code = pbv.ERROR_CODE.get(kind, pb.GenerateError.CODE_UNSPECIFIED)
    return pb.GenerateResponse(rid=rid, error=pb.GenerateError(code=code, message=message))


def score_to_pb(outcome: ScoreOutcome) -> pb.ScoreResponse:
    return pb.ScoreResponse(
        choices=[pb.ChoiceScore(token_ids=c.token_ids, token_logprobs=pbv.floats(c.token_logprobs),
                                unconditional_logprobs=pbv.floats(c.unconditional_logprobs))
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
    return pb.HealthResponse(status=pbv.HEALTH.get(status, pb.HealthResponse.STATUS_UNSPECIFIED), message=message)


def metrics_to_pb(metrics: dict[str, Any]) -> pb.MetricsResponse:
    """Copies every key that is a MetricsResponse field (busy_s, uptime_s, counters, ...)."""
    names = {f.name: f for f in pb.MetricsResponse.DESCRIPTOR.fields}
    kwargs = {}
    for key, value in metrics.items():
        f = names.get(key)
        if f is not None:
            kwargs[key] = float(value) if f.type == f.TYPE_DOUBLE else int(value)
    return pb.MetricsResponse(**kwargs)
