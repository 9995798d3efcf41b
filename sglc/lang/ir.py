"""The regex constants SGLang programs import for typed JSON fields (`sglang.lang.ir`).

    from sglc.lang.ir import REGEX_INT, REGEX_STR
    s += '{"age": ' + sgl.gen("age", regex=REGEX_INT) + ', "name": ' + sgl.gen("name", regex=REGEX_STR) + "}"

The patterns are SGLang's, character for character, so a program constrains its output exactly
as it does on SGLang. (This module is not sglc's IR; that is :mod:`sglc.ir`.)
"""

REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""  # NOTE: SGLang's choice (no escapes, no punctuation inside)

__all__ = ["REGEX_BOOL", "REGEX_FLOAT", "REGEX_INT", "REGEX_STR"]
