"""What every HTTP request model shares: strict validation, one error naming the first bad field.

The request models (openai_request.py, sglang_request.py) are pydantic models with
``extra="forbid"`` (a field the API does not define is a 400 naming it, never a silent ignore)
and ``strict`` (no "1" for 1, no 0 for false). :func:`parse_model` turns pydantic's
ValidationError into a :class:`FieldError`: one line, the field in the error body's ``param``.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from sglc.wire.prompt import RequestError
from sglc.wire.sampling_table import SamplingParam

__all__ = ["STRICT", "FieldError", "is_default", "parse_model", "sampling_model"]

STRICT = ConfigDict(extra="forbid", strict=True)

#: A sampling row's JSON type by its kind (null is always allowed: "the default").
_KIND_TYPES: dict[str, Any] = {"int": Optional[int], "float": Optional[float], "bool": Optional[bool],
                               "str_list": Union[str, list[str], None], "token_ids": Optional[list[int]]}


def sampling_model(name: str, spellings: Mapping[str, SamplingParam], with_defaults: bool) -> type[BaseModel]:
    """A strict pydantic model with one field per spelling of sglc.wire.sampling_table's rows (an
    API's column of the table): the request models derive their sampling fields from it.
    `with_defaults`: each field defaults to its row's default (as SGLang's API documents them);
    otherwise to null ("not given")."""
    fields: dict[str, Any] = {key: (_KIND_TYPES[row.kind], row.default if with_defaults else None)
                              for key, row in spellings.items()}
    return create_model(name, __config__=STRICT, **fields)


class FieldError(RequestError):
    """A 400 about one request field; ``param`` names it (the error body's ``param``)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def is_default(value: Any) -> bool:
    """null / false / empty: how clients send a field they do not use."""
    return value is None or value is False or value == [] or value == {} or (
        isinstance(value, list) and all(v is None for v in value))


def parse_model(model: type[BaseModel], data: Any, where: str = "", api: str = "this endpoint's request") -> Any:
    """``model`` validated from `data`; FieldError naming the first bad field otherwise. `api`
    names the request in the message for a field it does not define."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        # NOTE: a value that fits no member of a union gets one error per member; the one that got
        # deepest into the value is the one about what the client meant (a text part's "text": 5)
        first = max(err.errors(), key=lambda e: len(_field_path(e["loc"])))
        loc = _spelled(_field_path(first["loc"]))
        field = f"{where}.{loc}" if where and loc else (where or loc)
        if first["type"] == "extra_forbidden":
            raise FieldError(field, f"'{field}' is not a field of {api} "
                               "(see docs/http_server.md for the fields this server takes)") from None
        if first["type"] == "value_error":  # NOTE: our own validators' messages say what they got
            raise FieldError(field, f"'{field}': {str(first['msg']).removeprefix('Value error, ')}") from None
        raise FieldError(field, f"'{field}': {first['msg']}, got {_short(first.get('input'))}") from None


#: Parts of pydantic's error locations that name a union member, not a field: ``str``,
#: ``list[TextPart]``, ``TextPart``, ``function-after[...]``. Field names are snake_case.
_UNION_TAG = re.compile(r"^(str|int|float|bool|none|[a-z_-]+\[.*\]|[A-Z]\w*)$")


def _field_path(loc: tuple) -> list:
    return [p for p in loc if not (isinstance(p, str) and _UNION_TAG.match(p))]


def _spelled(path: list) -> str:
    """``messages[0].content[1].text``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
