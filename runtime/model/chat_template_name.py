"""The name of a chat template, recognised by the turn markers it writes (for ``sglc inspect-model``
and ``sglc models``; rendering never depends on it: ``tokenizer.py`` renders the template itself)."""
from __future__ import annotations

#: (name, markers that must all appear), most specific first
_KNOWN = (
    ("llama3", ("<|start_header_id|>", "<|eot_id|>")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),  # Qwen 1.5-3, SmolLM2, Hermes, ...
    ("gemma", ("<start_of_turn>", "<end_of_turn>")),
    ("phi3", ("<|user|>", "<|end|>")),  # Phi-3, Phi-3.5, Phi-4-mini
    ("llama2", ("[INST]", "[/INST]")),  # Llama 2 and Mistral's [INST] templates
)
#: what each name stands for
DESCRIPTIONS = {
    "llama3": "Llama 3 (<|start_header_id|> ... <|eot_id|>)",
    "chatml": "ChatML / Qwen (<|im_start|> ... <|im_end|>)",
    "gemma": "Gemma (<start_of_turn> ... <end_of_turn>)",
    "phi3": "Phi-3 (<|user|> ... <|end|>)",
    "llama2": "Llama 2 / Mistral ([INST] ... [/INST])",
    "custom": "custom (a template of its own)",
    "none": "none (no chat template: plain completion only)",
}


def chat_template_name(template: str | None) -> str:
    """``"chatml"``, ``"llama3"``, ``"llama2"``, ``"gemma"``, ``"phi3"``, ``"custom"`` or ``"none"``."""
    if not template or not template.strip():
        return "none"
    for name, markers in _KNOWN:
        if all(m in template for m in markers):
            return name
    return "custom"
