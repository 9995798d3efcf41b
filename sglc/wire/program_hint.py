"""ProgramHint: what the executor tells the runtime about a call's place in its program (issue 28).

A compiled program is a graph, so the executor knows, for every model call, whether the text the
call ends with (its prompt plus its output; for a score or cache-prefix call, its prompt) will
be extended by a later call of the same program, and how many of the program's other calls will
run first. The runtime uses that to keep the right prefixes in its radix cache (evict by
expected next use instead of LRU) and to schedule programs rather than calls. A hint is advice:
it never changes what a call returns, and the runtime bounds what it grants (a lease that
expires, a capped share of the KV pool), so a hostile hint cannot pin memory.

Fields:
    - ``program_id``: one program run (the executor picks a fresh id per run); 1-128 characters
      from ``[A-Za-z0-9._:-]``.
    - ``next_use``: how many of this program's calls finish before one extends this call's
      final text: 0 = the next call on it is ready when this one returns; ``NEVER`` (-1) = no
      call of this program extends it (the runtime may evict it first).
    - ``lease_ms``: how long after the call the runtime should keep that text for the program
      (0: the server's default); the server caps it.
    - ``continuation``: the text the program appends after this call's output before its next
      call reads on, as far as the executor knows it when it sends the call (constants, chat-role
      markers, arguments; sglc/executor/continuation.py): the runtime may prefill prompt + output
      + continuation as soon as the call ends, before the executor's next call arrives
      (precompute). Empty: nothing known. At most ``MAX_CONTINUATION_CHARS``.

The end of a program is its own message (``EndProgram`` over gRPC, ``Backend.end_program``):
every prefix still held for the program is released at once.

Behind sglang-router (``sglc fleet``) a hint rides in the request id: the router (0.3.2) rebuilds
``/generate`` bodies from its own struct, dropping ``program_hint``, but forwards ``rid``.
``to_rid`` writes ``sglc-ph/<next_use>/<lease_ms>/<nonce>/<program_id>``, then ``/<continuation>``
when there is one (``/`` is never in a program id, so everything after the fifth ``/`` is the
continuation verbatim; the nonce keeps request ids unique), and ``from_rid`` reads it back on the
worker. The server's request-id limit counts the id less its continuation (``rid_head``): the
continuation has its own, ``MAX_CONTINUATION_CHARS``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

#: ``next_use`` of a call whose final text no later call of the program extends.
NEVER = -1
#: Largest ``next_use`` (beyond it every distance is "far"; a bigger value is refused by name).
MAX_NEXT_USE = 1 << 20
#: Largest ``lease_ms`` a client may ask (the server caps it lower: ServerLimits.max_hint_lease_ms).
MAX_LEASE_MS = 24 * 3600 * 1000
MAX_PROGRAM_ID_CHARS = 128
#: Longest ``continuation`` (characters): what a precompute may prefill beyond a call's output.
MAX_CONTINUATION_CHARS = 4096
_PROGRAM_ID = re.compile(r"[A-Za-z0-9._:-]+")
#: The request ids that carry a hint (see the module docstring).
RID_PREFIX = "sglc-ph/"
_NONCE = re.compile(r"[A-Za-z0-9]{1,64}")


def check_program_id(program_id: Any, what: str = "program_id") -> str:
    """``program_id`` itself when it is a valid id, else ValueError/TypeError naming the problem."""
    if not isinstance(program_id, str):
        raise TypeError(f"{what} must be a string, got {type(program_id).__name__}")
    if not program_id:
        raise ValueError(f"{what} must not be empty")
    if len(program_id) > MAX_PROGRAM_ID_CHARS:
        raise ValueError(f"{what} has {len(program_id)} characters; the limit is {MAX_PROGRAM_ID_CHARS}")
    if not _PROGRAM_ID.fullmatch(program_id):
        raise ValueError(f"{what} {program_id[:40]!r} may only use letters, digits and . _ : -")
    return program_id


@dataclass(frozen=True, slots=True)
class ProgramHint:
    """One call's place in its program (see the module docstring). Validated on construction."""

    program_id: str
    next_use: int = 0
    lease_ms: int = 0
    continuation: str = ""

    def __post_init__(self) -> None:
        check_program_id(self.program_id, "program hint program_id")
        if not isinstance(self.continuation, str):
            raise TypeError(f"program hint continuation must be a string, got {type(self.continuation).__name__}")
        if len(self.continuation) > MAX_CONTINUATION_CHARS:
            raise ValueError(f"program hint continuation has {len(self.continuation)} characters; "
                             f"the limit is {MAX_CONTINUATION_CHARS}")
        for name, low, high in (("next_use", NEVER, MAX_NEXT_USE), ("lease_ms", 0, MAX_LEASE_MS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"program hint {name} must be an integer, got {type(value).__name__}")
            if not low <= value <= high:
                raise ValueError(f"program hint {name}={value} is outside [{low}, {high}]")

    @property
    def reused(self) -> bool:
        """Whether a later call of the program extends this call's final text."""
        return self.next_use != NEVER

    # --- JSON (SGLang-wire /generate ``program_hint``) ------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"program_id": self.program_id, "next_use": self.next_use}
        if self.lease_ms:
            out["lease_ms"] = self.lease_ms
        if self.continuation:
            out["continuation"] = self.continuation
        return out

    @classmethod
    def from_json(cls, value: Any, what: str = "program_hint") -> ProgramHint:
        """From a JSON object; TypeError/ValueError naming the field for anything else."""
        if not isinstance(value, Mapping):
            raise TypeError(f"{what} must be an object with program_id, next_use, lease_ms and continuation, "
                            f"got {type(value).__name__}")
        unknown = sorted(set(value) - {"program_id", "next_use", "lease_ms", "continuation"})
        if unknown:
            raise ValueError(f"{what} has unknown field(s) {', '.join(map(str, unknown))}; "
                             "known: program_id, next_use, lease_ms, continuation")
        if "program_id" not in value:
            raise ValueError(f"{what} needs a program_id")
        return cls(value["program_id"], value.get("next_use", 0), value.get("lease_ms", 0),
                   value.get("continuation", ""))

    # --- a request id (behind sglang-router) -------------------------------------------------
    def to_rid(self, nonce: str) -> str:
        """A request id carrying this hint; ``nonce`` (1-64 letters and digits) keeps ids unique."""
        if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
            raise ValueError(f"a hint's rid nonce must be 1-64 letters and digits, got {nonce!r}")
        head = f"{RID_PREFIX}{self.next_use}/{self.lease_ms}/{nonce}/{self.program_id}"
        return f"{head}/{self.continuation}" if self.continuation else head

    @classmethod
    def from_rid(cls, rid: Any, what: str = "rid") -> ProgramHint | None:
        """The hint a request id carries; None for any other id; ValueError naming ``what`` for an
        id that starts like one but is malformed."""
        if not isinstance(rid, str) or not rid.startswith(RID_PREFIX):
            return None
        parts = rid[len(RID_PREFIX):].split("/", 4)
        if len(parts) < 4 or not _NONCE.fullmatch(parts[2]) or not all(
                re.fullmatch(r"-?[0-9]{1,10}", p) for p in parts[:2]):
            raise ValueError(f"{what} {rid[:60]!r} starts with {RID_PREFIX!r} but is not "
                             f"{RID_PREFIX}<next_use>/<lease_ms>/<nonce>/<program_id>[/<continuation>]")
        try:
            return cls(parts[3], int(parts[0]), int(parts[1]), parts[4] if len(parts) == 5 else "")
        except (ValueError, TypeError) as err:
            raise ValueError(f"{what} {rid[:60]!r}: {err}") from None

    @staticmethod
    def rid_head(rid: str) -> str:
        """``rid`` less the continuation a hinted request id carries (what a server's request-id
        limit counts); any other id, or one whose tail is past ``MAX_CONTINUATION_CHARS``, whole."""
        if not rid.startswith(RID_PREFIX):
            return rid
        parts = rid[len(RID_PREFIX):].split("/", 4)
        if len(parts) < 5 or len(parts[4]) > MAX_CONTINUATION_CHARS:
            return rid
        return rid[:len(rid) - len(parts[4]) - 1]

    # --- protobuf (runtime.proto ProgramHint) -------------------------------------------------
    def to_pb(self, message: Any) -> None:
        """Fill a ``runtime_pb2.ProgramHint`` (e.g. ``request.hint``) in place."""
        message.program_id = self.program_id
        message.next_use = self.next_use
        message.lease_ms = self.lease_ms
        message.continuation = self.continuation

    @classmethod
    def from_pb(cls, message: Any) -> ProgramHint:
        return cls(message.program_id, int(message.next_use), int(message.lease_ms), message.continuation)
