"""sglc: a compiler and runtime for LM programs, with SGLang's frontend DSL.

    import sglc as sgl

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=64))

    graph = qa.trace()          # the typed IR (sglc.ir.Graph)
    sgl.set_default_backend(sgl.Runtime())       # the embedded runtime (or sgl.RuntimeEndpoint(...))
    state = qa.run(question="...")               # eager; qa.compile().run(...) runs the graph
"""
from typing import Any

from sglc.frontend.choices import (
    ChoicesSamplingMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from sglc.frontend.errors import NotExecutableError, TraceError
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
    """The backend `prog.run()` / `run_batch()` / compiled programs use when none is passed."""
    from sglc.executor.program import set_default_backend as _set

    _set(backend)


def RuntimeEndpoint(endpoint: str, **opts: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """A `sglc serve` runtime at "host:port" or "http://host:port" (the gRPC `srt` backend)."""
    from sglc.backends import make_backend

    return make_backend("srt", endpoint, **opts)


def Runtime(model: str = "default", **opts: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """The embedded runtime: our engine in this process (model "default" = SmolLM2-135M-Instruct).

    `opts` are engine settings (dtype, schedule_policy, disable_radix_cache, timeout, ...).
    Call `.close()` (or let the process end) to stop it.
    """
    from sglc.backends import make_backend

    return make_backend("srt", None, model=model, **opts)


def OpenAI(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """SGLang's OpenAI backend (not available yet)."""
    from sglc.backends import make_backend

    return make_backend("openai")


def load(path: Any) -> Any:
    """A CompiledProgram from a graph.pb (`prog.compile().save(path)` or `sglc compile`)."""
    from sglc.executor.compiled import load as _load

    return _load(path)


__all__ = [
    "ChoicesSamplingMethod", "NotExecutableError", "OpenAI", "ProgramState", "ProgramStateGroup",
    "RuntimeEndpoint", "SglFunction", "TraceError", "assistant", "assistant_begin", "assistant_end",
    "function", "gen", "load", "Runtime", "gen_int", "gen_string", "greedy_token_selection", "image", "select",
    "set_default_backend", "system", "system_begin", "system_end", "token_length_normalized",
    "unconditional_likelihood_normalized", "user", "user_begin", "user_end", "video",
]
