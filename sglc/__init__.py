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
import importlib
from typing import Any, Optional

#: The DSL's names, imported on first use (PEP 562): `sglc serve` and the other commands import
#: this package too, and the frontend (its FSM compiler, lark, numpy) costs ~0.2 s of their start.
_LAZY = {
    **dict.fromkeys(("ChoicesSamplingMethod", "greedy_token_selection", "token_length_normalized",
                     "unconditional_likelihood_normalized"), "sglc.frontend.choices"),
    **dict.fromkeys(("NotExecutableError", "NotSupportedError", "TraceError", "not_supported"), "sglc.frontend.errors"),
    **dict.fromkeys(("SglFunction", "function"), "sglc.frontend.function"),
    **dict.fromkeys(("assistant", "assistant_begin", "assistant_end", "gen", "gen_int", "gen_string", "image", "select",
                     "system", "system_begin", "system_end", "user", "user_begin", "user_end", "video"),
                    "sglc.frontend.primitives"),
    **dict.fromkeys(("ProgramState", "ProgramStateGroup"), "sglc.frontend.state"),
    "global_config": "sglc.lang.global_config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sglc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # NOTE: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"


def set_default_backend(backend: Any) -> None:
    """The backend `prog.run()` / `run_batch()` / compiled programs use when none is passed."""
    from sglc.executor.program import set_default_backend as _set

    _set(backend)


def RuntimeEndpoint(endpoint: str, **opts: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """A `sglc serve` runtime at "host:port" or "http://host:port" (the gRPC `srt` backend)."""
    from sglc.backends import make_backend

    return make_backend("srt", endpoint, **opts)


def Runtime(model: str = "default", *, model_path: Any = None, **opts: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """The embedded runtime: our engine in this process (model "default" = SmolLM2-135M-Instruct).

    `model_path` is SGLang's name for `model`. `opts` are engine settings (dtype,
    schedule_policy, disable_radix_cache, timeout, ...). `.shutdown()` (or `.close()`, or the
    process ending) stops it; `.get_tokenizer()` and `.endpoint` work as on SGLang's Runtime.
    """
    from sglc.backends import make_backend

    return make_backend("srt", None, model=model if model_path is None else model_path, **opts)


def Engine(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - SGLang's spelling
    """SGLang's offline engine (``sgl.Engine``): not supported yet; ``sgl.Runtime()`` runs our
    engine in this process instead."""
    from sglc.frontend.errors import not_supported

    raise not_supported("sgl.Engine(...) (SGLang's offline SRT engine)",
                        "use sgl.Runtime() (the embedded runtime in this process) or sgl.RuntimeEndpoint(...)")


def separate_reasoning(expr: Any = None, model_type: Optional[str] = None) -> Any:
    """SGLang's ``sgl.separate_reasoning(gen(...), model_type=...)``: not supported yet."""
    from sglc.frontend.errors import not_supported

    raise not_supported("sgl.separate_reasoning(...) (splitting a reasoning model's thinking from its answer)",
                        "append the gen itself and split its text after the run")


def OpenAI(model_name: str = "default", is_chat_model: Optional[bool] = None, chat_template: Any = None,  # noqa: N802
           is_azure: bool = False, *, base_url: Optional[str] = None, api_key: Optional[str] = None,
           **kwargs: Any) -> Any:
    """SGLang's OpenAI backend: any OpenAI-compatible endpoint (`base_url`, default $OPENAI_BASE_URL
    or OpenAI's) and model. `is_chat_model` True/False picks chat or completion calls (None:
    guessed from the model name). `timeout`, `max_retries`, `num_api_spec_tokens` pass through."""
    from sglc.backends import make_backend

    if is_azure:
        raise ValueError("sgl.OpenAI(is_azure=True): Azure OpenAI is not supported; point base_url at an "
                         "OpenAI-compatible endpoint instead")
    if chat_template is not None:
        raise ValueError("sgl.OpenAI(chat_template=...) is not supported: chat models get the endpoint's own "
                         "template; pass is_chat_model=False to send completion prompts instead")
    model_type = "auto" if is_chat_model is None else ("chat" if is_chat_model else "completion")
    return make_backend("openai", base_url, model=model_name, model_type=model_type, api_key=api_key, **kwargs)


def flush_cache(backend: Any = None) -> bool:
    """Empty the prefix cache of `backend` (default: the default backend); False when there is
    none or it cannot (SGLang's `sgl.flush_cache`)."""
    from sglc.executor.program import get_default_backend

    chosen = backend if backend is not None else get_default_backend()
    return False if chosen is None else bool(chosen.flush_cache())


def get_server_info(backend: Any = None) -> Optional[dict]:
    """Model facts and metrics of `backend` (default: the default backend); None when there is
    none (SGLang's `sgl.get_server_info`)."""
    from sglc.executor.program import get_default_backend

    chosen = backend if backend is not None else get_default_backend()
    return None if chosen is None else chosen.get_server_info()


def load(path: Any) -> Any:
    """A CompiledProgram from a graph.pb (`prog.compile().save(path)` or `sglc compile`)."""
    from sglc.executor.compiled import load as _load

    return _load(path)


__all__ = [
    "ChoicesSamplingMethod", "Engine", "NotExecutableError", "NotSupportedError", "OpenAI", "separate_reasoning", "flush_cache", "get_server_info", "global_config",
    "ProgramState", "ProgramStateGroup",
    "RuntimeEndpoint", "SglFunction", "TraceError", "assistant", "assistant_begin", "assistant_end",
    "function", "gen", "load", "Runtime", "gen_int", "gen_string", "greedy_token_selection", "image", "select",
    "set_default_backend", "system", "system_begin", "system_end", "token_length_normalized",
    "unconditional_likelihood_normalized", "user", "user_begin", "user_end", "video",
]
