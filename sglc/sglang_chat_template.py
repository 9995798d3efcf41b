"""SGLang's own frontend (`import sglang`) with the chat template of the model an sglc server runs.

SGLang's ``RuntimeEndpoint`` builds role text on the CLIENT: it picks one of SGLang's named
templates by matching ``/get_model_info``'s ``model_path`` against model-name patterns and falls
back to its ``default`` template (``SYSTEM:`` / ``USER:`` / ``ASSISTANT:`` lines). No server can
change that choice, and the names of GGUF files and local folders rarely match (a Qwen3, Phi-3 or
MoE GGUF gets ``default``; a Gemma GGUF gets Gemma's template even when the file's own template is
another one). An sglc server publishes the role prefixes and suffixes of its model's own template
(the tokenizer's, or a GGUF's ``tokenizer.chat_template``) in ``/get_model_info``'s
``chat_template``; :func:`use_server_chat_template` gives them to SGLang's client::

    import sglang as sgl
    from sglc.sglang_chat_template import use_server_chat_template
    sgl.set_default_backend(use_server_chat_template(sgl.RuntimeEndpoint("http://127.0.0.1:30001")))

``sgl.system/user/assistant`` then write exactly the text the model's template renders (what
``/v1/chat/completions`` and our own frontend use). ``sglang`` is imported only when called.
"""
from __future__ import annotations

from typing import Any

ROLES = ("system", "user", "assistant")


def sglang_chat_template(model_info: dict) -> Any:
    """SGLang's ``ChatTemplate`` for an sglc server's ``/get_model_info`` answer, registered in
    SGLang's template registry as ``sglc:<model name>`` (so ``chat_template_name=`` finds it too).

    Raises ValueError when the answer has no role prefixes/suffixes: a server other than sglc, or a
    template that does not split into per-role text (the chat API still renders it on the server).
    """
    from sglang.lang.chat_template import ChatTemplate, register_chat_template

    spec = model_info.get("chat_template")
    name = model_info.get("served_model_name") or model_info.get("model_name") or model_info.get("model_path")
    if not isinstance(spec, dict) or not isinstance(spec.get("role_prefix"), dict):
        raise ValueError(
            f"the server does not publish role prefixes/suffixes for {name!r} (/get_model_info has no "
            "'chat_template' object: not an sglc server, or its model's template does not split into "
            "per-role text); use /v1/chat/completions, which renders the template on the server")
    # NOTE: the assistant prefix is the role's own prefix, as in sglc's frontend (Semantics); for
    # templates where asking for a reply adds more (generation_prefix), a gen still follows it.
    template = ChatTemplate(
        name=f"sglc:{name}",
        default_system_prompt=None,  # the template's own default system text, if any, is in its prefixes
        role_prefix_and_suffix={role: (spec["role_prefix"].get(role, ""), spec["role_suffix"].get(role, ""))
                                for role in ROLES},
        # NOTE: no stop strings: the server already ends a turn at EOS and the template's
        # end-of-turn tokens (generation stop ids).
        stop_str=(),
    )
    register_chat_template(template)
    return template


def use_server_chat_template(endpoint: Any) -> Any:
    """Make SGLang's ``RuntimeEndpoint`` (already connected: it read ``/get_model_info``) use the
    server's own chat template instead of the one SGLang matched by model path; returns it."""
    endpoint.chat_template = sglang_chat_template(endpoint.model_info)
    return endpoint
