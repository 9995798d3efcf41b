"""Token-index build time on the SmolLM2 vocabulary: sglc.fsm vs outlines-core vs xgrammar.

Part of bench_constrained.py (kept apart: one concept per file). Each library builds, for the
same patterns, what it needs before the first masked step: sglc compiles the regex (FSM + byte
DFA) and builds the token index; outlines-core builds its ``Index``; xgrammar compiles the
grammar with its token-mask cache (``GrammarCompiler.compile_regex``, one thread, no cache).
Cold builds (caches cleared), best of ``repeats``. outlines-core / xgrammar are optional:
install them into a separate environment for the benchmark only; missing ones are skipped.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from sglc import fsm
from sglc.fsm.compressed import compile_regex as _lru_compile

IPV4 = r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)"
#: The JSON-decoding regex of the SGLang paper's benchmark (a character sheet).
SGLANG_JSON_REGEX = (
    r'\{\n  "name": "[\w\d\s]{1,16}",\n  "house": "(Gryffindor|Slytherin|Ravenclaw|Hufflepuff)",\n'
    r'  "blood status": "(Pure-blood|Half-blood|Muggle-born)",\n'
    r'  "occupation": "(student|teacher|auror|ministry of magic|death eater|order of the phoenix)",\n'
    r'  "wand": \{\n    "wood": "[\w\d\s]{1,16}",\n    "core": "[\w\d\s]{1,16}",\n'
    r'    "length": [0-9]{1,2}\.[0-9]{0,2}\n  \},\n  "alive": "(Alive|Deceased)",\n'
    r'  "patronus": "[\w\d\s]{1,16}",\n  "bogart": "[\w\d\s]{1,16}"\n\}'
)
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "pattern": r"[a-z]{1,10}@[a-z]{1,10}\.com"},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "[0-9]{5}"}},
                    "required": ["city", "zip"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "address", "tags", "active"],
}
PATTERNS: dict[str, str] = {
    "ipv4": IPV4,
    "date": r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    "email": r"[a-z0-9._%+-]{1,20}@[a-z0-9-]{1,20}\.(com|org|net|edu)",
    "float": r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    "json_string": r'"([^"\\\x00-\x1f]|\\["\\/bfnrt])*"',
    "sglang_json_regex": SGLANG_JSON_REGEX,
    "person_schema": fsm.regex_from_json_schema(PERSON_SCHEMA),
}


def _best(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def time_sglc(vocab: fsm.Vocabulary, pattern: str, repeats: int) -> dict:
    def build() -> None:
        _lru_compile.cache_clear()
        fsm.clear_token_index_cache()
        f = fsm.compile_regex(pattern)
        f.byte_dfa  # noqa: B018 - part of the build
        fsm.build_token_index(f, vocab, use_cache=False)

    index = fsm.build_token_index(fsm.compile_regex(pattern), vocab, use_cache=False)
    return {"seconds": _best(build, repeats), "index_states": index.num_states, "transitions": index.num_transitions}


def outlines_builder(token_bytes: list, special: set[int], eos: int) -> Callable[[str], None] | str:
    """A function building an outlines-core Index, or the reason it is unavailable."""
    try:
        import outlines_core
    except ImportError as err:
        return f"outlines-core not installed ({err.msg})"
    table: dict[bytes, list[int]] = {}
    for i, b in enumerate(token_bytes):
        if i not in special and i != eos and b:
            table.setdefault(b, []).append(i)
    vocab = outlines_core.Vocabulary(eos, table)
    return lambda pattern: outlines_core.Index(pattern, vocab)


def xgrammar_builder(token_bytes: list, eos: int) -> Callable[[str], None] | str:
    """A function compiling an xgrammar grammar (with its token-mask cache), or why not."""
    try:
        import xgrammar
    except ImportError as err:
        return f"xgrammar not installed ({err.msg})"
    info = xgrammar.TokenizerInfo(token_bytes, vocab_type=xgrammar.VocabType.RAW, stop_token_ids=[eos])
    compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    return lambda pattern: compiler.compile_regex(pattern)


def bench_index(tokenizer: Any, repeats: int = 3) -> dict:
    """Build times per pattern and library; prints a table and returns the figures."""
    t = time.perf_counter()
    vocab = fsm.Vocabulary.from_tokenizer(tokenizer)
    vocab.trie  # noqa: B018 - one-time per tokenizer, reported apart
    setup = time.perf_counter() - t
    token_bytes = tokenizer.all_token_bytes
    eos = min(tokenizer.stop_token_ids)
    others = {
        "outlines_core": outlines_builder(token_bytes, set(tokenizer.special_token_ids), eos),
        "xgrammar": xgrammar_builder(token_bytes, eos),
    }
    for name, b in others.items():
        if isinstance(b, str):
            print(f"[index] skipping {name}: {b}")
    print(f"[index] sglc vocabulary + trie (once per tokenizer): {setup:.3f}s")
    print(f"[index] {'pattern':18} {'sglc':>9} {'outlines':>9} {'xgrammar':>9}  sglc vs outlines")
    rows = []
    for name, pattern in PATTERNS.items():
        row: dict[str, Any] = {"pattern": name, "sglc": time_sglc(vocab, pattern, repeats)}
        for lib, b in others.items():
            row[lib] = None if isinstance(b, str) else _best(lambda b=b: b(pattern), repeats)
        ours = row["sglc"]["seconds"]
        ratio = row["outlines_core"] / ours if row["outlines_core"] else None
        row["outlines_over_sglc"] = ratio
        fmt = lambda v: f"{v:8.4f}s" if v is not None else "      n/a"  # noqa: E731
        print(f"[index] {name:18} {fmt(ours)} {fmt(row['outlines_core'])} {fmt(row['xgrammar'])}  "
              + (f"{ratio:6.1f}x faster" if ratio else ""))
        rows.append(row)
    return {"vocab_setup_s": setup, "vocab_size": vocab.size, "rows": rows,
            "skipped": {k: v for k, v in others.items() if isinstance(v, str)}}
