"""ServerLimits: every size a client controls, bounded in one place, checked BEFORE the work.

Each limit is a field with its default; ``sglc serve --limit NAME=VALUE`` changes one (the
docs' limits table lists them). A request over a limit fails with :class:`LimitExceeded`, a
RequestError whose message names the limit and its value: HTTP 400 (413 for the body), gRPC
RESOURCE_EXHAUSTED. The server keeps serving. The HTTP connection limits (``max_header_seconds``,
``max_body_seconds``, ``max_connections_per_client``, ``max_connections``) are enforced per
connection by connection_guard.py instead: 408, 429 or 503, then the connection is closed.

The checks are cheap by construction (lengths and counts, never a parse or a tokenization of
the thing being bounded), so a hostile request costs at most the bytes it sent.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sized

from sglc.wire.prompt import RequestError

__all__ = ["LimitExceeded", "ServerLimits", "utf8_or_error"]

_KIB, _MIB = 2**10, 2**20


class LimitExceeded(RequestError):
    """A request over one of the server's documented limits (HTTP 400/413, RESOURCE_EXHAUSTED)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one request (or connection) may ask of the server (counts, byte sizes and seconds, all >= 1)."""

    #: HTTP body bytes (from Content-Length, and counted while reading) and gRPC received message bytes.
    max_request_bytes: int = 8 * _MIB
    #: UTF-8 bytes of one prompt's text (chat: all message contents together), checked before tokenizing.
    max_prompt_bytes: int = 1 * _MIB
    #: Engine requests one client call may start: prompts x n (prompt lists, /generate batches).
    max_batch: int = 256
    #: ``n`` (choices per prompt) of the OpenAI endpoints and of /generate's sampling_params.
    max_n: int = 64
    #: Chat messages in one request.
    max_messages: int = 1024
    #: ``top_logprobs_num`` (gRPC, /generate), ``logprobs`` (/v1/completions), ``top_logprobs`` (chat).
    max_top_logprobs: int = 20
    #: Choices of one Score / select call.
    max_choices: int = 128
    #: UTF-8 bytes of one choice.
    max_choice_bytes: int = 16 * _KIB
    #: Stop strings of one request (and, separately, its stop_regex patterns).
    max_stop_strings: int = 32
    #: UTF-8 bytes of one stop string (or stop_regex pattern).
    max_stop_bytes: int = 1 * _KIB
    #: Stop token ids of one request.
    max_stop_token_ids: int = 256
    #: Nesting depth of an HTTP JSON body (objects and arrays).
    max_json_depth: int = 64
    #: Bytes of a client-chosen request id (gRPC ``rid``).
    max_rid_bytes: int = 256
    #: Milliseconds a program hint's lease may ask (issue 28): a longer ``lease_ms`` is capped to
    #: this, not refused (a hint is advice; the client's program runs either way).
    max_hint_lease_ms: int = 60_000
    #: Seconds an HTTP request's headers may take to arrive, from its first byte (a new connection:
    #: from being accepted); then 408 and closed (connection_guard.py). The answer is never timed.
    max_header_seconds: int = 10
    #: Seconds an HTTP request's body may take to arrive, from the end of its headers; then 408 and closed.
    max_body_seconds: int = 60
    #: Open HTTP connections from one client address; one more is answered 429 and closed at once.
    max_connections_per_client: int = 1024
    #: Open HTTP connections in all; one more is answered 503 and closed at once (keep it under `ulimit -n`).
    max_connections: int = 4096

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServerLimits.{f.name} must be an integer >= 1, got {value!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def replace(self, **changes: Any) -> ServerLimits:
        """A validated copy with some limits changed (ValueError naming an unknown limit)."""
        unknown = sorted(set(changes) - set(self.names()))
        if unknown:
            raise ValueError(f"unknown server limit {unknown[0]!r}; known: {', '.join(self.names())}")
        return ServerLimits(**{**{n: getattr(self, n) for n in self.names()}, **changes})

    # --- checks (each raises LimitExceeded naming the limit and its value) ---
    def exceeded(self, limit: str, what: str, got: int, unit: str = "") -> LimitExceeded:
        """`what` has `got` `unit` (e.g. "the prompt", 2000000, " bytes"), over `limit`."""
        value = getattr(self, limit)
        return LimitExceeded(f"{what} has {got}{unit}, over the server limit {limit}={value} "
                             f"(sglc serve --limit {limit}=N)", limit)

    def check_count(self, limit: str, what: str, items: Sized | int) -> None:
        """``len(items)`` (or the int itself) must not exceed the limit; `what` names the count
        ("the number of choices", "'n'")."""
        got = items if isinstance(items, int) else len(items)
        if got > getattr(self, limit):
            raise LimitExceeded(f"{what} is {got}, over the server limit {limit}={getattr(self, limit)} "
                                f"(sglc serve --limit {limit}=N)", limit)

    def check_text(self, limit: str, what: str, text: str) -> bytes:
        """The text's UTF-8 bytes, which must not exceed the limit; RequestError for text that is
        not valid Unicode (a lone surrogate). Cost: one check of the length, then one encode."""
        value = getattr(self, limit)
        if len(text) > value:  # NOTE: a character is >= 1 byte: over without encoding anything
            raise self.exceeded(limit, what, len(text), " characters")
        data = utf8_or_error(what, text)
        if len(data) > value:
            raise self.exceeded(limit, what, len(data), " bytes")
        return data

    def check_sampling(self, fields_: dict[str, Any]) -> None:
        """Stop strings, stop token ids and top logprobs of SamplingParams keyword fields."""
        stop = fields_.get("stop")
        if isinstance(stop, str):
            self.check_text("max_stop_bytes", "a stop string", stop)
        elif isinstance(stop, (list, tuple)):
            self.check_count("max_stop_strings", "the number of stop strings", stop)
            for i, s in enumerate(stop):
                if isinstance(s, str):
                    self.check_text("max_stop_bytes", f"stop string {i}", s)
        regexes = fields_.get("stop_regex")  # NOTE: counted and sized like stop strings, before compiling
        if isinstance(regexes, str):
            self.check_text("max_stop_bytes", "a stop_regex", regexes)
        elif isinstance(regexes, (list, tuple)):
            self.check_count("max_stop_strings", "the number of stop_regex patterns", regexes)
            for i, r in enumerate(regexes):
                if isinstance(r, str):
                    self.check_text("max_stop_bytes", f"stop_regex {i}", r)
        ids = fields_.get("stop_token_ids")
        if isinstance(ids, (list, tuple)):
            self.check_count("max_stop_token_ids", "the number of stop token ids", ids)
        top = fields_.get("top_logprobs_num")
        if isinstance(top, int) and not isinstance(top, bool):
            self.check_count("max_top_logprobs", "'top_logprobs_num'", top)


def utf8_or_error(what: str, text: str) -> bytes:
    """The text as UTF-8; RequestError naming the position of a lone surrogate (JSON's "\\ud800"
    decodes to one; no tokenizer or protobuf field can carry it)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise RequestError(f"{what} is not valid Unicode: a lone surrogate {text[err.start]!r} at "
                           f"character {err.start}") from None
