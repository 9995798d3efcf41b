"""llama.cpp's tokenizer test vocabularies, the oracle for tests/test_gguf_tokenizer.py.

llama.cpp ships ``models/ggml-vocab-<name>.gguf`` (a vocabulary-only GGUF made by its
convert_hf_to_gguf.py from the model's Hugging Face tokenizer) with ``.inp`` (test texts, each
followed by a line ``__ggml_vocab_test__``) and ``.out`` (one line per text: the ids Hugging Face's
tokenizer gives, ``tokenizer.encode(text, add_special_tokens=False)``, written by
convert_hf_to_gguf_update.py; tests/test-tokenizer-0.cpp compares llama.cpp against them with
``add_special=false``). They come in the llama-cpp-python sdist on PyPI (vendor/llama.cpp/models/):
it is downloaded once with pip (~77 MB) and only those files are kept, under the sglc cache root
(``$SGLC_CACHE_DIR/llamacpp-vocab/<version>``). Without network the tests skip, saying why.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

import pytest

from sglc_runtime.model.cache_root import cache_root

SDIST_VERSION = "0.3.36"
SDIST = f"llama-cpp-python=={SDIST_VERSION}"
_MEMBER_DIR = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/"
_SEPARATOR = "\n__ggml_vocab_test__\n"


def vocab_dir() -> Path:
    """The folder holding ``ggml-vocab-*`` files, downloading them on first use (or pytest.skip)."""
    folder = cache_root() / "llamacpp-vocab" / SDIST_VERSION
    if (folder / "ggml-vocab-gpt-2.gguf").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{SDIST_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # NOTE: one download when several test processes start at once
        if not (folder / "ggml-vocab-gpt-2.gguf").is_file():
            _download_into(folder)
    return folder


def _download_into(folder: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="sglc-llamacpp-sdist-") as tmp:
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
                 SDIST, "-d", tmp],
                capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            pytest.skip(f"llama.cpp's tokenizer vocabularies: `pip download {SDIST}` timed out")
        archives = list(Path(tmp).glob("*.tar.gz"))
        if run.returncode != 0 or not archives:
            why = (run.stderr.strip().splitlines() or ["no sdist"])[-1]
            pytest.skip(f"llama.cpp's tokenizer vocabularies: `pip download {SDIST}` failed "
                        f"(no network?): {why}")
        staging = folder.parent / f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            with tarfile.open(archives[0], "r:gz") as tar:
                for member in tar:
                    name = member.name[len(_MEMBER_DIR):] if member.name.startswith(_MEMBER_DIR) else ""
                    if member.isfile() and name.startswith("ggml-vocab-") and "/" not in name:
                        with tar.extractfile(member) as src, open(staging / name, "wb") as dst:
                            shutil.copyfileobj(src, dst)
            os.rename(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def vocab_file(name: str) -> Path:
    """``ggml-vocab-<name>.gguf`` (e.g. ``"llama-bpe"``)."""
    path = vocab_dir() / f"ggml-vocab-{name}.gguf"
    assert path.is_file(), f"{path.name} is not in llama-cpp-python {SDIST_VERSION}"
    return path


def vocab_cases(name: str) -> list[tuple[str, list[int]]]:
    """``[(text, ids), ...]`` from ``ggml-vocab-<name>.gguf.inp``/``.out`` (split as test-tokenizer-0.cpp)."""
    path = vocab_file(name)
    raw = Path(f"{path}.inp").read_bytes().decode("utf-8")  # NOTE: bytes: keep any "\r" as written
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(_SEPARATOR, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(_SEPARATOR)
    lines = Path(f"{path}.out").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == len(texts), f"{path.name}: {len(texts)} inputs but {len(lines)} outputs"
    return [(text, [int(t) for t in line.split()]) for text, line in zip(texts, lines)]
