"""`sglc inspect-model` and `sglc models`: what a model is, and which models can be served here.

    sglc inspect-model PATH_OR_NAME [--json]    # a .gguf, a folder, 'default', or org/name[:FILE.gguf|:QUANT]
    sglc models [PATH ...] [--json]             # the default model, the local Hugging Face cache, PATHs

Both read metadata only (``sglc_runtime.model.model_summary``): no weight is loaded, nothing is
written. inspect-model exits 2 when the model is refused (each problem named, as the loader says
it) or not found; `models` lists unsupported models too, with the reason.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from sglc.errors import SglcError

EXIT_REFUSED = 2


class ModelSpecError(SglcError):
    """The model spec names nothing (or an ambiguous hub repo)."""


def add_models_parsers(subparsers: Any) -> None:
    """Add `inspect-model` and `models` to the `sglc` command's subparsers."""
    p = subparsers.add_parser(
        "inspect-model", help="what a model is and which kernels would run it here (metadata only)",
        description="Print a model's architecture, size, tensor types, context, rope, sliding windows, experts, "
                    "tokenizer and chat template, and the kernels that would run it on this machine, from its "
                    "metadata only (no weights loaded). Exit status 2 when sglc cannot run it.")
    p.add_argument("model", metavar="PATH_OR_NAME",
                   help="'default', a .gguf file, a Hugging Face folder, or a Hub name in the local Hugging Face "
                        "cache: org/name, org/name:FILE.gguf, org/name:QUANT (e.g. :Q4_K_M)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_inspect_model)

    m = subparsers.add_parser(
        "models", help="list the models that can be served here (default, local Hugging Face cache, PATHs)",
        description="List the default model, every model in the local Hugging Face cache ($HF_HUB_CACHE, "
                    "$HF_HOME/hub or ~/.cache/huggingface/hub) and the PATHs given: name (what --model takes), "
                    "format, architecture, size, and whether sglc runs it (else why not).")
    m.add_argument("paths", nargs="*", metavar="PATH", help=".gguf files or model folders to list as well")
    m.add_argument("--json", action="store_true", help="print a JSON list")
    m.set_defaults(handler=cmd_models)


# ----- inspect-model -----
def _engine_settings(spec: str) -> dict[str, Any]:
    """What `sglc serve --model spec` would choose here: device, quantization, dtype, CPU level, kernels."""
    from sglc_runtime.engine.engine_config import AUTO_QUANTIZATION, EngineConfig
    from sglc_runtime.model.native import build, capabilities
    from sglc_runtime.model.placement import resolve_placement

    # NOTE: `sglc serve`'s default, resolved by the engine's own rule (not a copy of it)
    cfg = EngineConfig(model=spec, quantization=AUTO_QUANTIZATION)
    device = resolve_placement().device
    try:
        level, level_error = capabilities.chosen_level(), None
    except capabilities.CpuLevelError as err:
        level, level_error = "generic", str(err)
    off = build.disabled_reason()
    # NOTE: at "generic" the integer kernels are the scalar reference (KernelInfo.int_linears_native)
    native = off is None and level_error is None and level != "generic"
    return {"device": str(device), "quantization": cfg.quantization, "dtype": cfg.dtype, "cpu_level": level,
            "cpu_levels": list(capabilities.supported_levels()), "native_kernels": native,
            "why_not_native": off or level_error or ("generic level" if level == "generic" else None)}


def cmd_inspect_model(args: argparse.Namespace) -> int:
    from sglc_runtime.model.model_summary import kernel_plan, summarize

    try:
        s = summarize(args.model)
    except (FileNotFoundError, ValueError) as err:  # not found / ambiguous hub repo
        raise ModelSpecError(str(err).strip().splitlines()[0]) from None
    settings = _engine_settings(args.model)
    plan = kernel_plan(s, settings["quantization"], settings["dtype"], settings["device"].split(":")[0],
                       settings["cpu_level"], settings["native_kernels"])
    if args.json:
        print(json.dumps({**s.to_dict(), "kernels": {**settings, "per_type": plan}}, indent=2))
    else:
        print(format_summary(s, settings, plan))
    return 0 if s.supported else EXIT_REFUSED


def human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def human_count(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def format_summary(s: Any, settings: dict[str, Any], plan: dict[str, str]) -> str:
    """The text `sglc inspect-model` prints."""
    from sglc_runtime.model.chat_template_name import DESCRIPTIONS

    files = ", ".join(f"{name} ({human_bytes(n)})" for name, n in s.files.items()) or "none"
    runs = f" -> runs as {s.runs_as}, {s.model_class}" if s.runs_as else " (not run by sglc)"
    shape = f" ({s.layers} layers, hidden {s.hidden_size}, vocabulary {s.vocab_size})" if s.layers else ""
    types = ", ".join(f"{k} x{v.count} ({human_bytes(v.bytes)})" for k, v in
                      sorted(s.tensor_types.items(), key=lambda kv: -kv[1].bytes))
    if s.sliding_window and s.layer_pattern:
        n = s.layer_pattern.count("S")
        window = f"{s.sliding_window} tokens on {n} of {len(s.layer_pattern)} layers ({s.layer_pattern})"
    else:
        window = "none (every layer attends to the whole context)"
    lines = [
        ("model", s.name),
        ("path", s.path),
        ("format", f"{'GGUF' if s.format == 'gguf' else 'Hugging Face safetensors'}, {human_bytes(s.file_bytes)}: "
                   f"{files}"),
        ("architecture", f"{s.architecture or '?'}{runs}"),
        ("parameters", f"{human_count(s.parameters)}{shape}"),
        ("tensor types", types or "none"),
        ("context", f"{s.context_length} tokens" if s.context_length else "?"),
        ("rope", s.rope or "?"),
        ("sliding window", window),
        ("experts", f"{s.experts}, top-{s.experts_per_token} per token" if s.experts else "none (dense)"),
        ("tokenizer", s.tokenizer or "?"),
        ("chat template", DESCRIPTIONS.get(s.chat_template, s.chat_template)),
    ]
    native = "native integer kernels on" if settings["native_kernels"] else \
        f"native integer kernels off ({settings['why_not_native']})"
    lines.append(("kernels", f"device {settings['device']}, CPU level {settings['cpu_level']} (this CPU runs "
                             f"{', '.join(settings['cpu_levels'])}), {native}; default quantization "
                             f"{settings['quantization']} (serve's auto), dtype {settings['dtype']}"))
    out = [f"{k + ':':<15} {v}" for k, v in lines]
    out += [f"  {kind:<6} {how}" for kind, how in plan.items()]
    if s.format == "gguf" and s.supported:
        out.append("  (1-D tensors are read as float32; the token embedding is decoded per looked-up row)")
    if s.supported:
        serve_name = "default" if s.name.startswith("default (") else s.name
        out.append(f"{'status:':<15} supported: sglc serve --model {serve_name}")
    else:
        out.append(f"{'status:':<15} refused")
        out += [f"  - {p}" for p in s.problems]
    return "\n".join(out)


# ----- models -----
def _rows(paths: list[str]) -> tuple[list[dict[str, Any]], str]:
    from sglc_runtime.model.default_model import DEFAULT_MODEL_NAME, find_default_gguf, locate_model
    from sglc_runtime.model.hf_cache import cached_models, hub_cache_dir
    from sglc_runtime.model.model_summary import summarize_path

    entries: list[tuple[str, str, Any]] = []  # (name, source, thunk)
    try:
        entries.append(("default", "default", lambda: summarize_path(
            f"default ({DEFAULT_MODEL_NAME})", find_default_gguf(), True)))
    except FileNotFoundError:
        pass
    cache = hub_cache_dir()
    for hub in cached_models(cache):
        entries.append((hub.name, "hf-cache", lambda h=hub: summarize_path(h.name, h.path, h.format == "gguf")))
    for p in paths:
        entries.append((p, "path", lambda p=p: summarize_path(p, *locate_model(p))))
    rows = []
    for name, source, thunk in entries:
        try:
            s = thunk()
        except (OSError, ValueError) as err:
            rows.append({"name": name, "source": source, "format": None, "architecture": None, "parameters": None,
                         "file_bytes": None, "chat_template": None, "supported": False,
                         "problems": [str(err).strip().splitlines()[0]]})
            continue
        rows.append({"name": "default" if source == "default" else s.name, "source": source, "format": s.format,
                     "architecture": s.runs_as or s.architecture, "parameters": s.parameters,
                     "file_bytes": s.file_bytes, "chat_template": s.chat_template, "supported": s.supported,
                     "problems": s.problems, "path": s.path})
    return rows, str(cache)


def cmd_models(args: argparse.Namespace) -> int:
    rows, cache = _rows(args.paths)
    if args.json:
        print(json.dumps({"hf_cache": cache, "models": rows}, indent=2))
        return 0
    header = ("NAME", "FORMAT", "ARCHITECTURE", "PARAMS", "SIZE", "TEMPLATE", "SUPPORTED")
    table = [header]
    for r in rows:
        fmt = {"gguf": "GGUF", "hf": "HF"}.get(r["format"], "?")
        ok = "yes" if r["supported"] else f"no: {r['problems'][0] if r['problems'] else '?'}"
        table.append((r["name"], fmt, r["architecture"] or "?",
                      human_count(r["parameters"]) if r["parameters"] is not None else "?",
                      human_bytes(r["file_bytes"]) if r["file_bytes"] is not None else "?", r["chat_template"] or "?",
                      ok))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    print(f"\nHugging Face cache: {cache}" + ("" if any(r["source"] == "hf-cache" for r in rows) else
                                               " (no models; fetch one with `hf download org/name`)"))
    print("serve one with: sglc serve --model NAME   (details: sglc inspect-model NAME)")
    return 0
