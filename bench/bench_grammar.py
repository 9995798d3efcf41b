"""Grammar engines side by side on SmolLM2's 49,152-token vocabulary: sglc.grammar vs xgrammar
0.2.8 vs llguidance 1.9.1, on the same grammars, in one run. Prints a table and ratios; asserts
nothing (a shared machine's timings are noise: say what else was running).

Per grammar:
- **compile**: sglc ``compile_grammar`` (automaton + token classes; the vocabulary's trie is
  built once beforehand, as xgrammar's TokenizerInfo and llguidance's LLTokenizer are);
  xgrammar ``GrammarCompiler.compile_grammar`` (cache off, 1 thread); llguidance ``LLMatcher``
  construction (its grammar is the same IR printed as lark by the tests' ``to_lark``;
  llguidance's own ``gbnf_to_lark`` refuses our printed classes' escapes).
  Best of ``--repeats`` (10: a sub-millisecond compile is noise in any one run).
- **mask**: per-token mask time p50/p99 along the same sampled token paths (sglc's temperature-1
  sampler of tests/test_grammar_engine_cases.py, seeded): sglc ``GrammarMatcher.mask()`` (a
  fresh matcher per path, so nothing is cached across paths but the compiled grammar's own
  tables), xgrammar ``fill_next_token_bitmask``, llguidance ``fill_next_token_bitmask``.

    python bench/bench_grammar.py [--paths 20] [--repeats 10] [--grammars json,sql]
"""
from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
from pathlib import Path

import numpy as np

from sglc.grammar import GrammarMatcher, compile_grammar

ROOT = Path(__file__).resolve().parent.parent
# NOTE: the grammars, the sampler and the IR -> lark printer are the engine tests' helpers (one
# definition for tests and bench); a repository module, not a dependency, so imported by path.
sys.path.insert(0, str(ROOT / "tests"))
_cases = importlib.import_module("test_grammar_engine_cases")
arithmetic_grammar, decode, json_grammar = _cases.arithmetic_grammar, _cases.decode, _cases.json_grammar
sample_tokens, smollm2_vocab, sql_grammar = _cases.sample_tokens, _cases.smollm2_vocab, _cases.sql_grammar
to_lark, tree_schema_grammar = _cases.to_lark, _cases.tree_schema_grammar


def _gbnf_grammar():
    from sglc.grammar import parse_gbnf

    return parse_gbnf((ROOT / "tests" / "fixtures" / "grammars" / "json.gbnf").read_text())


GRAMMARS = {
    "json": json_grammar,
    "tree_schema": tree_schema_grammar,
    "arithmetic": arithmetic_grammar,
    "sql": sql_grammar,
    "gbnf_json": _gbnf_grammar,  # llama.cpp grammars/json.gbnf through the GBNF front end
}


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class _Engines:
    """The three engines over one vocabulary."""

    def __init__(self, vocab) -> None:
        self.vocab = vocab
        token_bytes = [vocab.token_bytes(i) or b"" for i in range(vocab.size)]
        self.xgr = self.llg = None
        try:
            import xgrammar

            info = xgrammar.TokenizerInfo(token_bytes, vocab_type=xgrammar.VocabType.RAW,
                                          stop_token_ids=list(vocab.eos_token_ids))
            self.xgr = xgrammar
            self.xgr_compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        except ImportError as err:
            print(f"xgrammar not installed ({err.msg})")
        try:
            import llguidance
            import llguidance.numpy

            self.llg = llguidance
            self.llnp = llguidance.numpy
            self.llg_tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_LLGTokenizer(vocab)), slices=None)
        except ImportError as err:
            print(f"llguidance not installed ({err.msg})")

    def xgr_compile(self, ebnf: str):
        return self.xgr_compiler.compile_grammar(self.xgr.Grammar.from_ebnf(ebnf))

    def llg_matcher(self, lark: str):
        m = self.llg.LLMatcher(self.llg_tok, self.llg.LLMatcher.grammar_from_lark(lark), log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        return m


class _LLGTokenizer:
    """What llguidance.TokenizerWrapper reads of a tokenizer: token bytes, EOS, a tokenize
    function (greedy longest match over the vocabulary: only used for text inside grammars)."""

    def __init__(self, vocab) -> None:
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        self.special_token_ids = [i for i in range(vocab.size) if vocab.token_bytes(i) is None]
        # NOTE: special tokens need some bytes; llguidance never allows them in grammar text.
        self.tokens = [vocab.token_bytes(i) or f"<|special_{i}|>".encode() for i in range(vocab.size)]
        self._by_bytes = {}
        for i in range(vocab.size):
            tb = vocab.token_bytes(i)
            if tb is not None:
                self._by_bytes.setdefault(tb, i)
        self._longest = max(len(b) for b in self._by_bytes)

    def __call__(self, text) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                tok = self._by_bytes.get(data[i:i + n])
                if tok is not None:
                    out.append(tok)
                    i += n
                    break
            else:
                raise ValueError(f"byte {data[i]:#x} has no token")
        return out


def _percentiles(times: list[float]) -> tuple[float, float]:
    if not times:
        return float("nan"), float("nan")
    a = np.array(times) * 1e6
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def bench_grammar(name: str, grammar, eng: _Engines, paths: int, repeats: int) -> dict:
    vocab = eng.vocab
    ebnf = grammar.to_ebnf()
    row: dict = {"name": name}
    row["sglc_compile"] = _best(lambda: compile_grammar(grammar, vocab), repeats)
    compiled = compile_grammar(grammar, vocab)
    rng = np.random.default_rng(27)
    token_paths = [sample_tokens(compiled, rng, free_steps=int(rng.integers(5, 60))) for _ in range(paths)]
    row["steps"] = sum(len(p) for p in token_paths)
    row["chars"] = sum(len(decode(vocab, p)) for p in token_paths)

    times: list[float] = []
    fresh: list[float] = []  # steps whose state the matcher had not seen (its mask cache missed)
    advance: list[float] = []
    for path in token_paths:
        m = GrammarMatcher(compiled)
        for t in path:
            seen = m._states[-1] in m._pool.masks
            start = time.perf_counter()
            m.mask()
            times.append(time.perf_counter() - start)
            if not seen:
                fresh.append(times[-1])
            start = time.perf_counter()
            m.advance(t)
            advance.append(time.perf_counter() - start)
    row["sglc_mask"] = _percentiles(times)
    row["sglc_new_state"] = _percentiles(fresh)
    row["sglc_advance"] = _percentiles(advance)

    if eng.xgr is not None:
        try:
            row["xgr_compile"] = _best(lambda: eng.xgr_compile(ebnf), repeats)
            xc = eng.xgr_compile(ebnf)
            bitmask = eng.xgr.allocate_token_bitmask(1, vocab.size)
            times = []
            for path in token_paths:
                xm = eng.xgr.GrammarMatcher(xc)
                for t in path:
                    start = time.perf_counter()
                    xm.fill_next_token_bitmask(bitmask)
                    times.append(time.perf_counter() - start)
                    assert xm.accept_token(t)
            row["xgr_mask"] = _percentiles(times)
        except Exception as err:  # noqa: BLE001 - a row says why an engine could not run
            row["xgr_error"] = f"{type(err).__name__}: {err}"[:100]
    if eng.llg is not None:
        try:
            llnp = eng.llnp
            lark = to_lark(grammar)
            row["llg_compile"] = _best(lambda: eng.llg_matcher(lark), repeats)
            bitmask = llnp.allocate_token_bitmask(1, vocab.size)
            times = []
            for path in token_paths:
                lm = eng.llg_matcher(lark)
                for t in path:
                    start = time.perf_counter()
                    llnp.fill_next_token_bitmask(lm, bitmask, 0)
                    times.append(time.perf_counter() - start)
                    if not lm.consume_token(t):
                        raise RuntimeError(f"llguidance refused token {t}: {lm.get_error()}")
            row["llg_mask"] = _percentiles(times)
        except Exception as err:  # noqa: BLE001
            row["llg_error"] = f"{type(err).__name__}: {err}"[:100]
    return row


def xgrammar_builtin_json_row(eng: _Engines, paths: int, repeats: int) -> dict | None:
    """xgrammar on its own builtin JSON grammar (right-recursive strings, its best case), along
    paths sampled from sglc's JSON grammar that it accepts: a reference, not the same grammar."""
    if eng.xgr is None:
        return None
    vocab = eng.vocab
    grammar = eng.xgr.Grammar.builtin_json_grammar()
    row: dict = {"name": "xgr_builtin"}
    row["xgr_compile"] = _best(lambda: eng.xgr_compiler.compile_grammar(grammar), repeats)
    xc = eng.xgr_compiler.compile_grammar(grammar)
    compiled = compile_grammar(json_grammar(), vocab)
    rng = np.random.default_rng(27)
    bitmask = eng.xgr.allocate_token_bitmask(1, vocab.size)
    times: list[float] = []
    steps = 0
    while steps < paths:
        path = sample_tokens(compiled, rng, free_steps=int(rng.integers(5, 60)))
        if decode(vocab, path)[:1] not in (b"{", b"["):
            continue  # NOTE: its root is an object or an array
        steps += 1
        xm = eng.xgr.GrammarMatcher(xc)
        for t in path:
            start = time.perf_counter()
            xm.fill_next_token_bitmask(bitmask)
            times.append(time.perf_counter() - start)
            if not xm.accept_token(t):
                break
    row["xgr_mask"] = _percentiles(times)
    return row


def _fmt_ms(x) -> str:
    return f"{x * 1e3:9.1f}" if x is not None else "        -"


def _fmt_us(pair) -> str:
    return f"{pair[0]:7.1f} {pair[1]:8.1f}" if pair is not None else "      -        -"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", type=int, default=20, help="sampled token paths per grammar")
    ap.add_argument("--repeats", type=int, default=10, help="compile timings: best of this many")
    ap.add_argument("--grammars", default=",".join(GRAMMARS), help="comma-separated subset")
    args = ap.parse_args()
    vocab = smollm2_vocab()
    vocab.trie  # noqa: B018 - built once, as the other engines' tokenizer setup is
    compile_grammar(json_grammar(), vocab)  # warm the vocabulary's trie preorder
    eng = _Engines(vocab)
    print(f"# {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"vocab {vocab.size}, paths {args.paths}")
    rows = [bench_grammar(n, GRAMMARS[n](), eng, args.paths, args.repeats) for n in args.grammars.split(",")]
    ref = xgrammar_builtin_json_row(eng, args.paths, args.repeats)
    print(f"\n{'grammar':12} {'steps':>6} | {'compile ms: sglc':>16} {'xgr':>9} {'llg':>9} | "
          f"{'mask us p50/p99: sglc':>22} {'xgr':>16} {'llg':>16}")
    for r in rows:
        print(f"{r['name']:12} {r['steps']:6d} | {_fmt_ms(r['sglc_compile']):>16} {_fmt_ms(r.get('xgr_compile'))} "
              f"{_fmt_ms(r.get('llg_compile'))} | {_fmt_us(r['sglc_mask']):>22} {_fmt_us(r.get('xgr_mask')):>16} "
              f"{_fmt_us(r.get('llg_mask')):>16}")
    print("\nsglc detail, us p50/p99: mask on states new to the matcher (its per-state cache missed), advance")
    for r in rows:
        print(f"  {r['name']:12} new-state mask {_fmt_us(r['sglc_new_state'])}   advance {_fmt_us(r['sglc_advance'])}")
    if ref is not None:
        print(f"{'(reference) xgrammar on its builtin JSON grammar: compile':60} {_fmt_ms(ref['xgr_compile'])} ms, "
              f"mask p50/p99 {_fmt_us(ref['xgr_mask'])} us")
    print("\nratios (sglc / other; < 1 means sglc is faster):")
    for r in rows:
        parts = []
        for key, label in (("xgr", "xgrammar"), ("llg", "llguidance")):
            if f"{key}_compile" in r and f"{key}_mask" in r:
                parts.append(f"{label}: compile {r['sglc_compile'] / r[f'{key}_compile']:.2f}x, "
                             f"mask p50 {r['sglc_mask'][0] / r[f'{key}_mask'][0]:.2f}x, "
                             f"p99 {r['sglc_mask'][1] / r[f'{key}_mask'][1]:.2f}x")
            elif f"{key}_error" in r:
                parts.append(f"{label}: {r[f'{key}_error']}")
        print(f"  {r['name']:12} " + "; ".join(parts))


if __name__ == "__main__":
    main()
