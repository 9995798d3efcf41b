"""Prompts as requests give them: text or token ids, plus images for a text-only model.

Images go where the text has IMAGE_MARKER (one marker per image, in order), or before the text
when it has none. The runtime's models are text-only: "reject" refuses images, "placeholder"
replaces each with the text ``<image: NAME>``.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Sequence

#: Where an image goes in a text prompt (one marker per image, in order).
IMAGE_MARKER = "<|sglc_image|>"
IMAGE_MODES = ("reject", "placeholder")


class RequestError(ValueError):
    """A bad request (INVALID_ARGUMENT, HTTP 400); the message is one line naming the problem."""


@dataclass(frozen=True)
class PromptInput:
    """A request's prompt: text or token ids, plus images (paths/URLs) and what to do with them."""

    text: str | None = None
    token_ids: Sequence[int] | None = None
    images: tuple[str, ...] = ()
    image_mode: str = "reject"


def image_placeholder(source: str) -> str:
    """The text that stands for an image on a text-only model: ``<image: NAME>``."""
    name = posixpath.basename(source.replace("\\", "/").split("?", 1)[0].rstrip("/")) or source
    return f"<image: {name}>"


def resolve_prompt(prompt: PromptInput, *, supports_images: bool = False) -> tuple[str | list[int], list[str]]:
    """The engine's prompt (text or ids) and warnings. Raises RequestError for a bad prompt.

    Images: the model is text-only (supports_images=False) -> mode "reject" refuses the request;
    "placeholder" replaces each IMAGE_MARKER (or, with no marker, prepends) ``<image: NAME>``.
    """
    if prompt.image_mode not in IMAGE_MODES:
        raise RequestError(f"image_mode must be one of {IMAGE_MODES}, got {prompt.image_mode!r}")
    if (prompt.text is None) == (prompt.token_ids is None):
        raise RequestError("the prompt needs exactly one of text or token_ids")
    images = list(prompt.images)
    if prompt.token_ids is not None:
        if images:
            raise RequestError("images need a text prompt (they are placed at the image markers in it)")
        return list(prompt.token_ids), []
    text = prompt.text
    markers = text.count(IMAGE_MARKER)
    if markers and markers != len(images):
        raise RequestError(f"the prompt has {markers} image markers but {len(images)} images")
    if not images:
        return text, []
    if supports_images:  # NOTE: no multimodal model yet; kept so the contract is explicit
        raise RequestError("image inputs are not implemented by this runtime")
    if prompt.image_mode == "reject":
        raise RequestError(f"the model is text-only and the request has {len(images)} image(s); "
                           "send image_mode=placeholder to replace each with the text '<image: NAME>'")
    holders = [image_placeholder(s) for s in images]
    if markers:
        pieces = text.split(IMAGE_MARKER)
        text = pieces[0] + "".join(h + p for h, p in zip(holders, pieces[1:]))
    else:
        text = "".join(holders) + text
    return text, [f"text-only model: {len(images)} image(s) replaced by text placeholders ({', '.join(holders)})"]
