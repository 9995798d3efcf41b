"""sglc: a compiler and runtime for LM programs, with SGLang's frontend DSL.

    import sglc as sgl

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=64))

    graph = qa.trace()          # the typed IR (sglc.ir.Graph)
"""
from typing import Any

from sglc.frontend.choices import (
    ChoicesSamplingMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from sglc.frontend.errors import NotExecutableError, TraceError, not_executable
from sglc.frontend.function import SglFunction, function
from sglc.frontend.primitives import (
    assistant,
    assistant_begin,
    assistant_end,
    gen,
    gen_int,
    gen_string,
    image,
    select,
    system,
    system_begin,
    system_end,
    user,
    user_begin,
    user_end,
    video,
)
from sglc.frontend.state import ProgramState, ProgramStateGroup

__version__ = "0.1.0"


def set_default_backend(backend: Any) -> None:
    """SGLang's default-backend setting; backends arrive with the executor."""
    raise not_executable("sgl.set_default_backend()")


def RuntimeEndpoint(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """SGLang's HTTP runtime backend; backends arrive with the executor."""
    raise not_executable("sgl.RuntimeEndpoint()")


def OpenAI(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """SGLang's OpenAI backend; backends arrive with the executor."""
    raise not_executable("sgl.OpenAI()")


__all__ = [
    "ChoicesSamplingMethod", "NotExecutableError", "OpenAI", "ProgramState", "ProgramStateGroup",
    "RuntimeEndpoint", "SglFunction", "TraceError", "assistant", "assistant_begin", "assistant_end",
    "function", "gen", "gen_int", "gen_string", "greedy_token_selection", "image", "select",
    "set_default_backend", "system", "system_begin", "system_end", "token_length_normalized",
    "unconditional_likelihood_normalized", "user", "user_begin", "user_end", "video",
]
