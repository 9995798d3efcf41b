"""StreamState: everything one prompt stream holds while a program runs.

A stream is the text the model sees (``text``), the same content as chat messages
(``messages``, built at each ROLE_END), the open role, the variables it can read, media, and
open var scopes. A fork copies its parent's state at the fork; the copy remembers where it
started (``fork_start``) so a ``concate_and_append`` join can append only the child's new text.

NOTE: a StreamState is touched by one operation at a time: the graph executor runs a stream's
nodes in order (each waits for its stream predecessor), and the eager sink runs a stream's
primitives on one serial queue. Nothing here locks.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from sglc.wire.backend import Prompt

#: Where an image sits in a stream's text (the runtime's marker; backends place or replace it).
IMAGE_MARKER = "<|sglc_image|>"


@dataclasses.dataclass
class StreamState:
    """One stream's prompt text, chat messages, role, variables and media."""

    text: str = ""
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    role: Optional[str] = None
    #: Where the open role's content starts in `text`.
    role_start: int = 0
    #: Media appended inside the open role (they go into that message's content).
    role_media: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    variables: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Variables this stream defined since it was forked, in order (what a join gathers).
    defined: list[str] = dataclasses.field(default_factory=list)
    #: Per-call metadata of the gen/select that produced each variable.
    meta_info: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    images: list[str] = dataclasses.field(default_factory=list)
    #: Open var scopes: (name, start offset in `text`), innermost last.
    scopes: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    #: Length of `text` when this stream was forked from its parent (0 for stream 0).
    fork_start: int = 0
    stream_id: int = 0

    # ----- text -----
    def append(self, text: str) -> None:
        self.text += text

    def prompt(self) -> Prompt:
        """What a backend sees for a call made now."""
        return Prompt(text=self.text, messages=self.current_messages(), images=list(self.images))

    def current_messages(self) -> list[dict[str, Any]]:
        """Completed messages plus the open role's content so far (chat backends need it)."""
        messages = [dict(m) for m in self.messages]
        if self.role is not None:
            messages.append({"role": self.role, "content": self._content(self.text[self.role_start:])})
        return messages

    def _content(self, text: str) -> Any:
        if not self.role_media:
            return text
        return [*self.role_media, {"type": "text", "text": text.replace(IMAGE_MARKER, "")}]

    # ----- roles -----
    def open_role(self, role: str, prefix: str) -> None:
        if self.role is not None:
            raise ValueError(f"cannot begin the {role} role inside the open {self.role} role: roles do not nest")
        self.text += prefix
        self.role = role
        self.role_start = len(self.text)
        self.role_media = []

    def close_role(self, role: str, suffix: str) -> None:
        if self.role != role:
            state = "no role is open" if self.role is None else f"the open role is {self.role}"
            raise ValueError(f"cannot end the {role} role: {state}")
        self.messages.append({"role": role, "content": self._content(self.text[self.role_start:])})
        self.text += suffix
        self.role = None
        self.role_media = []

    def add_media(self, kind: str, path: str, **extra: Any) -> None:
        """Media go where they were appended: a marker in the text, the path in `images`."""
        self.text += IMAGE_MARKER
        self.images.append(path)
        if self.role is not None:
            self.role_media.append({"type": f"{kind}_url", f"{kind}_url": {"url": path, **extra}})

    # ----- variables -----
    def define(self, name: str, value: Any, meta: Optional[dict[str, Any]] = None) -> None:
        self.variables[name] = value
        if name not in self.defined:
            self.defined.append(name)
        if meta is not None:
            self.meta_info[name] = meta

    def get(self, name: str) -> Any:
        if name not in self.variables:
            known = ", ".join(sorted(self.variables)) or "none"
            raise KeyError(f'no variable "{name}" in this stream (defined so far: {known})')
        return self.variables[name]

    def begin_scope(self, name: str) -> None:
        self.scopes.append((name, len(self.text)))

    def end_scope(self, name: str) -> str:
        if not self.scopes or self.scopes[-1][0] != name:
            raise ValueError(f'cannot end var_scope "{name}": it is not the innermost open scope')
        _, start = self.scopes.pop()
        value = self.text[start:]
        self.define(name, value)
        return value

    # ----- streams -----
    def fork_copy(self, stream_id: int) -> "StreamState":
        """A child stream: this stream's text, messages, role and variables at this moment."""
        return StreamState(
            text=self.text,
            messages=[dict(m) for m in self.messages],
            role=self.role,
            role_start=self.role_start,
            role_media=list(self.role_media),
            variables=dict(self.variables),
            defined=[],
            meta_info=dict(self.meta_info),
            images=list(self.images),
            scopes=[],
            fork_start=len(self.text),
            stream_id=stream_id,
        )

    def new_text(self) -> str:
        """The text appended since this stream was forked."""
        return self.text[self.fork_start:]
