from . import fsm_pb2 as _fsm_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ImageMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_MODE_REJECT: _ClassVar[ImageMode]
    IMAGE_MODE_PLACEHOLDER: _ClassVar[ImageMode]
IMAGE_MODE_REJECT: ImageMode
IMAGE_MODE_PLACEHOLDER: ImageMode

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Prompt(_message.Message):
    __slots__ = ("text", "token_ids", "images", "image_mode")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_MODE_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: TokenIds
    images: _containers.RepeatedScalarFieldContainer[str]
    image_mode: ImageMode
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., images: _Optional[_Iterable[str]] = ..., image_mode: _Optional[_Union[ImageMode, str]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens", "stop_regex", "regex", "json_schema", "fsm", "ebnf")
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_REGEX_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    FSM_FIELD_NUMBER: _ClassVar[int]
    EBNF_FIELD_NUMBER: _ClassVar[int]
    max_new_tokens: int
    min_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    frequency_penalty: float
    presence_penalty: float
    repetition_penalty: float
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    skip_special_tokens: bool
    stop_regex: _containers.RepeatedScalarFieldContainer[str]
    regex: str
    json_schema: str
    fsm: _fsm_pb2.FSM
    ebnf: str
    def __init__(self, max_new_tokens: _Optional[int] = ..., min_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., skip_special_tokens: _Optional[bool] = ..., stop_regex: _Optional[_Iterable[str]] = ..., regex: _Optional[str] = ..., json_schema: _Optional[str] = ..., fsm: _Optional[_Union[_fsm_pb2.FSM, _Mapping]] = ..., ebnf: _Optional[str] = ...) -> None: ...

class LogprobOptions(_message.Message):
    __slots__ = ("return_logprob", "top_logprobs_num", "logprob_start_len")
    RETURN_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_NUM_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_START_LEN_FIELD_NUMBER: _ClassVar[int]
    return_logprob: bool
    top_logprobs_num: int
    logprob_start_len: int
    def __init__(self, return_logprob: _Optional[bool] = ..., top_logprobs_num: _Optional[int] = ..., logprob_start_len: _Optional[int] = ...) -> None: ...

class TopLogprobs(_message.Message):
    __slots__ = ("token_ids", "logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class FinishReason(_message.Message):
    __slots__ = ("type", "matched_text", "matched_token_id", "length", "message")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[FinishReason.Type]
        STOP: _ClassVar[FinishReason.Type]
        LENGTH: _ClassVar[FinishReason.Type]
        ABORT: _ClassVar[FinishReason.Type]
    TYPE_UNSPECIFIED: FinishReason.Type
    STOP: FinishReason.Type
    LENGTH: FinishReason.Type
    ABORT: FinishReason.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TEXT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type: FinishReason.Type
    matched_text: str
    matched_token_id: int
    length: int
    message: str
    def __init__(self, type: _Optional[_Union[FinishReason.Type, str]] = ..., matched_text: _Optional[str] = ..., matched_token_id: _Optional[int] = ..., length: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("rid", "prompt", "sampling", "logprobs", "stream", "hint")
    RID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    rid: str
    prompt: Prompt
    sampling: SamplingParams
    logprobs: LogprobOptions
    stream: bool
    hint: ProgramHint
    def __init__(self, rid: _Optional[str] = ..., prompt: _Optional[_Union[Prompt, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., logprobs: _Optional[_Union[LogprobOptions, _Mapping]] = ..., stream: _Optional[bool] = ..., hint: _Optional[_Union[ProgramHint, _Mapping]] = ...) -> None: ...

class GenerateChunk(_message.Message):
    __slots__ = ("text", "token_ids", "logprobs", "top_logprobs")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ...) -> None: ...

class GenerateComplete(_message.Message):
    __slots__ = ("text", "output_ids", "prompt_tokens", "completion_tokens", "cached_tokens", "finish_reason", "output_logprobs", "output_top_logprobs", "input_logprobs", "warnings")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    INPUT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    text: str
    output_ids: _containers.RepeatedScalarFieldContainer[int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish_reason: FinishReason
    output_logprobs: _containers.RepeatedScalarFieldContainer[float]
    output_top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    input_logprobs: _containers.RepeatedScalarFieldContainer[float]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, text: _Optional[str] = ..., output_ids: _Optional[_Iterable[int]] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., finish_reason: _Optional[_Union[FinishReason, _Mapping]] = ..., output_logprobs: _Optional[_Iterable[float]] = ..., output_top_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ..., input_logprobs: _Optional[_Iterable[float]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerateError(_message.Message):
    __slots__ = ("code", "message")
    class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CODE_UNSPECIFIED: _ClassVar[GenerateError.Code]
        INTERNAL: _ClassVar[GenerateError.Code]
        ABORTED: _ClassVar[GenerateError.Code]
        UNAVAILABLE: _ClassVar[GenerateError.Code]
    CODE_UNSPECIFIED: GenerateError.Code
    INTERNAL: GenerateError.Code
    ABORTED: GenerateError.Code
    UNAVAILABLE: GenerateError.Code
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: GenerateError.Code
    message: str
    def __init__(self, code: _Optional[_Union[GenerateError.Code, str]] = ..., message: _Optional[str] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("rid", "chunk", "complete", "error")
    RID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    rid: str
    chunk: GenerateChunk
    complete: GenerateComplete
    error: GenerateError
    def __init__(self, rid: _Optional[str] = ..., chunk: _Optional[_Union[GenerateChunk, _Mapping]] = ..., complete: _Optional[_Union[GenerateComplete, _Mapping]] = ..., error: _Optional[_Union[GenerateError, _Mapping]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("prompt", "choices", "unconditional", "hint")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    UNCONDITIONAL_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    prompt: Prompt
    choices: _containers.RepeatedScalarFieldContainer[str]
    unconditional: bool
    hint: ProgramHint
    def __init__(self, prompt: _Optional[_Union[Prompt, _Mapping]] = ..., choices: _Optional[_Iterable[str]] = ..., unconditional: _Optional[bool] = ..., hint: _Optional[_Union[ProgramHint, _Mapping]] = ...) -> None: ...

class ChoiceScore(_message.Message):
    __slots__ = ("token_ids", "token_logprobs", "unconditional_logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    UNCONDITIONAL_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    token_logprobs: _containers.RepeatedScalarFieldContainer[float]
    unconditional_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., token_logprobs: _Optional[_Iterable[float]] = ..., unconditional_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("choices", "prompt_tokens", "cached_tokens", "warnings")
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    choices: _containers.RepeatedCompositeFieldContainer[ChoiceScore]
    prompt_tokens: int
    cached_tokens: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, choices: _Optional[_Iterable[_Union[ChoiceScore, _Mapping]]] = ..., prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class CachePrefixRequest(_message.Message):
    __slots__ = ("prompt", "hint")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    prompt: Prompt
    hint: ProgramHint
    def __init__(self, prompt: _Optional[_Union[Prompt, _Mapping]] = ..., hint: _Optional[_Union[ProgramHint, _Mapping]] = ...) -> None: ...

class CachePrefixResponse(_message.Message):
    __slots__ = ("prompt_tokens", "cached_tokens", "warnings")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    cached_tokens: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class ProgramHint(_message.Message):
    __slots__ = ("program_id", "next_use", "lease_ms", "continuation")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_USE_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    next_use: int
    lease_ms: int
    continuation: str
    def __init__(self, program_id: _Optional[str] = ..., next_use: _Optional[int] = ..., lease_ms: _Optional[int] = ..., continuation: _Optional[str] = ...) -> None: ...

class EndProgramRequest(_message.Message):
    __slots__ = ("program_id",)
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    def __init__(self, program_id: _Optional[str] = ...) -> None: ...

class EndProgramResponse(_message.Message):
    __slots__ = ("released_tokens",)
    RELEASED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    released_tokens: int
    def __init__(self, released_tokens: _Optional[int] = ...) -> None: ...

class FlushRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FlushResponse(_message.Message):
    __slots__ = ("flushed", "message")
    FLUSHED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    flushed: bool
    message: str
    def __init__(self, flushed: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class ModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ChatTemplate(_message.Message):
    __slots__ = ("role_prefix", "role_suffix", "generation_prefix")
    class RolePrefixEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RoleSuffixEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    ROLE_SUFFIX_FIELD_NUMBER: _ClassVar[int]
    GENERATION_PREFIX_FIELD_NUMBER: _ClassVar[int]
    role_prefix: _containers.ScalarMap[str, str]
    role_suffix: _containers.ScalarMap[str, str]
    generation_prefix: str
    def __init__(self, role_prefix: _Optional[_Mapping[str, str]] = ..., role_suffix: _Optional[_Mapping[str, str]] = ..., generation_prefix: _Optional[str] = ...) -> None: ...

class ModelInfoResponse(_message.Message):
    __slots__ = ("model_name", "model_path", "context_length", "vocab_size", "eos_token_ids", "bos_token_id", "dtype", "supports_images", "chat_template", "jinja_chat_template")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BOS_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_IMAGES_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    JINJA_CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_path: str
    context_length: int
    vocab_size: int
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    bos_token_id: int
    dtype: str
    supports_images: bool
    chat_template: ChatTemplate
    jinja_chat_template: str
    def __init__(self, model_name: _Optional[str] = ..., model_path: _Optional[str] = ..., context_length: _Optional[int] = ..., vocab_size: _Optional[int] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., bos_token_id: _Optional[int] = ..., dtype: _Optional[str] = ..., supports_images: _Optional[bool] = ..., chat_template: _Optional[_Union[ChatTemplate, _Mapping]] = ..., jinja_chat_template: _Optional[str] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ("check_generate",)
    CHECK_GENERATE_FIELD_NUMBER: _ClassVar[int]
    check_generate: bool
    def __init__(self, check_generate: _Optional[bool] = ...) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("status", "message")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[HealthResponse.Status]
        SERVING: _ClassVar[HealthResponse.Status]
        NOT_SERVING: _ClassVar[HealthResponse.Status]
        DRAINING: _ClassVar[HealthResponse.Status]
    STATUS_UNSPECIFIED: HealthResponse.Status
    SERVING: HealthResponse.Status
    NOT_SERVING: HealthResponse.Status
    DRAINING: HealthResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: HealthResponse.Status
    message: str
    def __init__(self, status: _Optional[_Union[HealthResponse.Status, str]] = ..., message: _Optional[str] = ...) -> None: ...

class MetricsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MetricsResponse(_message.Message):
    __slots__ = ("prompt_tokens", "cached_tokens", "cache_hit_rate", "computed_prefill_tokens", "completion_tokens", "num_waiting", "num_running", "num_kv_slots", "num_used_slots", "cached_slots", "pool_usage", "num_finished", "num_retractions", "num_steps", "num_requests", "num_cancelled", "num_invalid", "num_errors", "num_active", "uptime_s", "busy_s", "hinted_tokens", "hint_evictions")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_SLOTS_FIELD_NUMBER: _ClassVar[int]
    NUM_USED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    CACHED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    POOL_USAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_FINISHED_FIELD_NUMBER: _ClassVar[int]
    NUM_RETRACTIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    NUM_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    NUM_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    NUM_INVALID_FIELD_NUMBER: _ClassVar[int]
    NUM_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NUM_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    BUSY_S_FIELD_NUMBER: _ClassVar[int]
    HINTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    HINT_EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    cached_tokens: int
    cache_hit_rate: float
    computed_prefill_tokens: int
    completion_tokens: int
    num_waiting: int
    num_running: int
    num_kv_slots: int
    num_used_slots: int
    cached_slots: int
    pool_usage: float
    num_finished: int
    num_retractions: int
    num_steps: int
    num_requests: int
    num_cancelled: int
    num_invalid: int
    num_errors: int
    num_active: int
    uptime_s: float
    busy_s: float
    hinted_tokens: int
    hint_evictions: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., cache_hit_rate: _Optional[float] = ..., computed_prefill_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., num_waiting: _Optional[int] = ..., num_running: _Optional[int] = ..., num_kv_slots: _Optional[int] = ..., num_used_slots: _Optional[int] = ..., cached_slots: _Optional[int] = ..., pool_usage: _Optional[float] = ..., num_finished: _Optional[int] = ..., num_retractions: _Optional[int] = ..., num_steps: _Optional[int] = ..., num_requests: _Optional[int] = ..., num_cancelled: _Optional[int] = ..., num_invalid: _Optional[int] = ..., num_errors: _Optional[int] = ..., num_active: _Optional[int] = ..., uptime_s: _Optional[float] = ..., busy_s: _Optional[float] = ..., hinted_tokens: _Optional[int] = ..., hint_evictions: _Optional[int] = ...) -> None: ...
