"""Hugging Face Hub names (``Qwen/Qwen3-0.6B``, ``org/repo-GGUF:Q4_K_M``) looked up in the local
Hugging Face cache, never downloaded.

The cache is the one ``huggingface_hub`` writes (``hf download``): its root is ``$HF_HUB_CACHE``
(or the older ``$HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``. A model repo lives in
``models--{org}--{name}/``: ``refs/main`` holds the commit of ``snapshots/<commit>/``, whose files
are symlinks into ``blobs/``. Only ``pathlib`` is used (no network, no huggingface_hub import), so
``sglc serve`` works where the hub library is missing; tests hold the layout to
``huggingface_hub.scan_cache_dir``.

A snapshot is a Hugging Face folder (config.json + safetensors) or holds GGUF files; a name picks
one GGUF by ``:file.gguf`` or by a quant tag (``:Q4_K_M``), and must when there are several.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: ``org/name`` or ``org/name:selector`` (a GGUF file name or quant tag)
_HUB_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?::(?P<select>[^:/\\]+(?:/[^:\\]+)*))?$")
#: multimodal projector files that GGUF repos ship beside the model (never the language model)
_PROJECTOR = re.compile(r"mmproj", re.IGNORECASE)


class HubModelNotFound(FileNotFoundError):
    """A hub name that is not in the local cache (the message says where it looked and how to fetch it)."""


class HubModelError(ValueError):
    """A cached repo that does not say which model to run (several GGUF files, none, no weights)."""


@dataclass(frozen=True, slots=True)
class HubModel:
    """One model of the cache: ``path`` is the snapshot folder (Hugging Face) or the .gguf file."""

    name: str  # the name that finds it again: "org/name" or "org/name:file.gguf"
    repo_id: str
    snapshot: Path
    format: str  # "hf" or "gguf"
    path: Path


def hub_cache_dir() -> Path:
    """The cache root huggingface_hub uses (see the module docstring for the order)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def parse_hub_name(spec: str) -> tuple[str, str | None] | None:
    """``"org/name:Q4_K_M"`` -> ``("org/name", "Q4_K_M")``; None when ``spec`` is not a hub name."""
    m = _HUB_NAME.match(spec.strip())
    return (m["repo"], m["select"]) if m else None


def repo_folder(repo_id: str, cache: Path | None = None) -> Path:
    """``<cache>/models--{org}--{name}``."""
    return (cache or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def snapshot_of(folder: Path) -> Path | None:
    """The snapshot ``refs/main`` points at; without refs/main, the newest snapshot (None: none)."""
    ref = folder / "refs" / "main"
    if ref.is_file():
        snap = folder / "snapshots" / ref.read_text().strip()
        return snap if snap.is_dir() else None
    snaps = [p for p in (folder / "snapshots").glob("*") if p.is_dir()]
    return max(snaps, key=lambda p: p.stat().st_mtime) if snaps else None


def is_hf_folder(folder: Path) -> bool:
    """config.json beside safetensors weights (symlinks into blobs/ must resolve: a partial download does not count)."""
    return (folder / "config.json").is_file() and any(p.is_file() for p in folder.glob("*.safetensors"))


def gguf_files(snapshot: Path) -> list[Path]:
    """The snapshot's .gguf files that are there (downloaded), in name order."""
    return sorted(p for p in snapshot.rglob("*.gguf") if p.is_file())


def _fetch_hint(repo_id: str, select: str | None) -> str:
    if select and select.lower().endswith(".gguf"):
        return f"hf download {repo_id} {select}"
    if select:
        return f"hf download {repo_id} --include '*{select}*'"
    return f"hf download {repo_id}"


def _pick_gguf(repo_id: str, snapshot: Path, files: list[Path], select: str | None) -> Path:
    rel = {p: p.relative_to(snapshot).as_posix() for p in files}
    if select is None:
        models = [p for p in files if not _PROJECTOR.search(p.name)]
        if len(models) == 1:
            return models[0]
        listed = ", ".join(rel[p] for p in files)
        raise HubModelError(f"{repo_id} holds {len(models)} GGUF files ({listed}); pick one: "
                            f"{repo_id}:FILE.gguf or a quant tag such as {repo_id}:Q4_K_M")
    if select.lower().endswith(".gguf"):
        found = [p for p in files if select in (rel[p], p.name)]
    else:  # NOTE: a quant tag is a whole dash/dot/slash-separated part of the name (Q4_K does not match Q4_K_M)
        tag = re.compile(rf"(?:^|[-./]){re.escape(select)}(?:$|[-./])", re.IGNORECASE)
        found = [p for p in files if tag.search(rel[p][:-len(".gguf")])]
    if len(found) == 1:
        return found[0]
    listed = ", ".join(rel[p] for p in (found or files)) or "none"
    what = "matches several GGUF files" if found else "matches no GGUF file"
    raise HubModelError(f"{repo_id}:{select} {what} in the cache ({listed})")


def find_hub_model(spec: str) -> HubModel:
    """The cached model ``spec`` names (see the module docstring).

    Raises:
        ValueError: ``spec`` is not ``org/name[:file.gguf|:QUANT]``.
        HubModelNotFound: not in the cache (names where it looked and the command that fetches it).
        HubModelError: the repo is there but does not say which model (several GGUF files) or has none.
    """
    parsed = parse_hub_name(spec)
    if parsed is None:
        raise ValueError(f"{spec!r} is not a Hugging Face Hub name (org/name, org/name:FILE.gguf, org/name:QUANT)")
    repo_id, select = parsed
    cache = hub_cache_dir()
    folder = repo_folder(repo_id, cache)
    snapshot = snapshot_of(folder) if folder.is_dir() else None
    if snapshot is None:
        raise HubModelNotFound(
            f"model {spec!r} is neither a local path nor in the Hugging Face cache (looked for {folder}; the cache "
            f"is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub); sglc never downloads: "
            f"fetch it with `{_fetch_hint(repo_id, select)}` (or `huggingface-cli download {repo_id}`)")
    files = gguf_files(snapshot)
    if select is None and is_hf_folder(snapshot):
        return HubModel(repo_id, repo_id, snapshot, "hf", snapshot)
    if files:
        path = _pick_gguf(repo_id, snapshot, files, select)
        name = repo_id if select is None else f"{repo_id}:{select}"
        return HubModel(name, repo_id, snapshot, "gguf", path)
    if select is not None:
        raise HubModelError(f"{repo_id} in the cache ({snapshot}) holds no GGUF file to match {select!r}")
    raise HubModelError(f"{repo_id} in the cache ({snapshot}) has neither config.json + *.safetensors nor a "
                        f".gguf file (a partial download? fetch it with `{_fetch_hint(repo_id, None)}`)")


def cached_models(cache: Path | None = None) -> list[HubModel]:
    """Every model in the cache, in repo order: one entry per Hugging Face snapshot, and one per
    GGUF file (named ``org/name`` where the repo has one, ``org/name:file.gguf`` where several)."""
    cache = cache or hub_cache_dir()
    out: list[HubModel] = []
    for folder in sorted(cache.glob("models--*")) if cache.is_dir() else []:
        repo_id = folder.name[len("models--"):].replace("--", "/", 1)
        snapshot = snapshot_of(folder)
        if snapshot is None:
            continue
        if is_hf_folder(snapshot):
            out.append(HubModel(repo_id, repo_id, snapshot, "hf", snapshot))
        files = [p for p in gguf_files(snapshot) if not _PROJECTOR.search(p.name)]
        for p in files:
            # NOTE: the plain repo name finds the safetensors folder where the repo has both
            plain = len(files) == 1 and not (out and out[-1].repo_id == repo_id)
            name = repo_id if plain else f"{repo_id}:{p.relative_to(snapshot).as_posix()}"
            out.append(HubModel(name, repo_id, snapshot, "gguf", p))
    return out
