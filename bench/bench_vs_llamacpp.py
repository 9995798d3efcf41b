"""Serving speed side by side: running servers (sglc serve, llama.cpp's llama-server, any other
OpenAI-compatible `/v1/completions`) on the same workloads. Builds and starts nothing itself.

    python bench/bench_vs_llamacpp.py --server sglc-int4=http://127.0.0.1:30001 \
                                      --server llama.cpp=http://127.0.0.1:8080 [--baseline llama.cpp]

Workloads (greedy, eos ignored, `/v1/completions` over HTTP, one server at a time, in the order
given; the table is printed at the end with each server's ratio to --baseline):

1. 1 stream: a ~32-token prompt, 256 new tokens                  -> tok/s
2. 8 concurrent x 128 new tokens                                -> tok/s
3. 32 concurrent x 128 new tokens                               -> tok/s
4. 32 requests sharing a ~1,000-token prefix, 8 at a time, 32 new each -> wall s
5. 8 conversations x 4 turns (each prompt grows by the last answer), 32 new per turn -> wall s
6. 1 stream after a ~1,100-token history (cached by one request first, as in a long chat),
   128 new tokens                                               -> tok/s
7. prefill: 8 distinct ~1,000-token prompts, one at a time, 1 new token each
                                 -> prompt tok/s (the servers' usage.prompt_tokens / wall s)
8. time to first token under a long prefill: a distinct ~4,000-token prompt (1 new token) is
   sent, and 0.3 s later a ~16-token one (1 new token)         -> the short one's wall s;
   also reported: the long request's own wall s (both lower is better)

Run a subset with --workloads 7,8 (same as --only). Workloads 7 and 8 measure prefill: their
prompts start differently and share no prefix with each other or with 1-6, but they are the same
on every run (fixed seeds), so a second run against the same server finds them in its prompt
cache: the script warns when a server reports cached prompt tokens
(usage.prompt_tokens_details.cached_tokens); restart the server between runs. Workload 8 needs a
4k-token context per request: llama-server's per-slot context is -c / -np unless --kv-unified
(-np 32 -c 65536 gives 2,048 per slot and the long request is refused), so start it with
`-np 32 -c 65536 --kv-unified` for 8 (or -c 131072 for 4,096 per slot).

Timings on a shared machine are noise: run one server at a time on a quiet machine (`uptime`),
with the same thread count for each (say it in --note). docs/benchmarks.md has how to build
llama-server from the llama-cpp-python sdist.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import urllib.error
import urllib.request

WORDS = ("river stone market winter harbor lantern orchard signal copper meadow engine violet canyon "
         "ledger falcon tundra quartz ember willow beacon glacier saddle thistle marble").split()


class Server:
    """One OpenAI-compatible completions endpoint."""

    def __init__(self, name: str, url: str, model: str | None, timeout: float) -> None:
        self.name, self.url, self.timeout = name, url.rstrip("/"), timeout
        self.model = model or self._first_model()

    def _request(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"{self.name}: HTTP {err.code} on {path}: {err.read()[:300]!r}") from None

    def _first_model(self) -> str:
        return self._request("/v1/models")["data"][0]["id"]

    def _completion(self, prompt: str, max_tokens: int) -> dict:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True, "stream": False}
        return self._request("/v1/completions", body)

    def complete(self, prompt: str, max_tokens: int) -> tuple[str, int]:
        """The completion's text and its completion-token count."""
        out = self._completion(prompt, max_tokens)
        return out["choices"][0]["text"], int(out["usage"]["completion_tokens"])

    def prompt_usage(self, prompt: str, max_tokens: int) -> tuple[int, int]:
        """The completion's prompt-token count and how many of those the server says it had cached
        (usage.prompt_tokens_details.cached_tokens; 0 where it does not say)."""
        usage = self._completion(prompt, max_tokens)["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return int(usage["prompt_tokens"]), int(cached)


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def distinct_prompt(rng: random.Random, first: int, n: int) -> str:
    """n words starting with WORDS[first]: prompts given different `first`s share no prefix
    (beyond a BOS token) with each other, nor with workloads 1-6's prompts (those start with a
    capitalised label). About 1.08 tokens a word with SmolLM2's tokenizer."""
    return " ".join([WORDS[first]] + [rng.choice(WORDS) for _ in range(n - 1)])


def _warn_cached(server: Server, what: str, cached: int, prompts: int) -> None:
    if cached > 2 * prompts:  # a BOS or a first word may match; more is a cache hit
        print(f"  warning: {server.name}: {cached} prompt tokens of {what} came from the server's cache "
              "(a repeated run?): restart the server for a cold prefill figure", flush=True)


def concurrent_tok_s(server: Server, streams: int, new_tokens: int, seed: int) -> float:
    rng = random.Random(seed)
    prompts = [f"Story {i}: " + words(rng, 24) for i in range(streams)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        counts = [n for _, n in pool.map(lambda p: server.complete(p, new_tokens), prompts)]
    return sum(counts) / (time.perf_counter() - t0)


def shared_prefix_s(server: Server, requests: int, at_once: int, new_tokens: int, seed: int) -> float:
    rng = random.Random(seed)
    prefix = "Reference document:\n" + words(rng, 800) + "\n"
    prompts = [prefix + f"Question {i}: what does the document say about {rng.choice(WORDS)}?\nAnswer:"
               for i in range(requests)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(lambda p: server.complete(p, new_tokens), prompts))
    return time.perf_counter() - t0


def multi_turn_s(server: Server, conversations: int, turns: int, new_tokens: int, seed: int) -> float:
    rng = random.Random(seed)

    def conversation(i: int) -> None:
        history = f"Conversation {i}.\n"
        for t in range(turns):
            history += f"User: tell me about the {rng.choice(WORDS)} {t}.\nAssistant:"
            text, _ = server.complete(history, new_tokens)
            history += text + "\n"

    t0 = time.perf_counter()
    with ThreadPoolExecutor(conversations) as pool:
        list(pool.map(conversation, range(conversations)))
    return time.perf_counter() - t0


def long_history_tok_s(server: Server, history_words: int, new_tokens: int, seed: int) -> float:
    """One stream decoding over a long context: the history is sent once first (both servers
    keep it cached, as in a chat), then the timed request adds one short turn to it."""
    rng = random.Random(seed)
    history = "Conversation so far:\n" + words(rng, history_words) + "\n"
    server.complete(history, 1)
    t0 = time.perf_counter()
    _, count = server.complete(history + "User: and then?\nAssistant:", new_tokens)
    return count / (time.perf_counter() - t0)


def prefill_tok_s(server: Server, prompts: int, prompt_words: int, seed: int) -> float:
    """Prompt tokens per second, one distinct long prompt at a time, 1 new token each (so the
    time is nearly all prefill). Counts the servers' own usage.prompt_tokens."""
    rng = random.Random(seed)
    texts = [distinct_prompt(rng, i, prompt_words) for i in range(prompts)]
    total = cached = 0
    t0 = time.perf_counter()
    for text in texts:
        n, c = server.prompt_usage(text, 1)
        total, cached = total + n, cached + c
    seconds = time.perf_counter() - t0
    _warn_cached(server, "the prefill prompts", cached, prompts)
    return total / seconds


def ttft_under_prefill_s(server: Server, long_words: int, short_words: int, delay: float,
                         seed: int) -> tuple[float, float]:
    """(the short request's wall s, the long request's wall s): a distinct long prompt is sent
    (1 new token), and `delay` seconds later, while it is being prefilled, a short one (1 new
    token): how long a newcomer waits behind a long prefill (a server that splits long prefills
    into chunks can let it in early)."""
    rng = random.Random(seed)
    long_text = distinct_prompt(rng, len(WORDS) - 1, long_words)
    short_text = distinct_prompt(rng, len(WORDS) - 2, short_words)
    done: list[float] = []

    def long_request() -> tuple[int, int]:
        out = server.prompt_usage(long_text, 1)
        done.append(time.perf_counter())
        return out

    with ThreadPoolExecutor(1) as pool:
        t0 = time.perf_counter()
        pending = pool.submit(long_request)
        time.sleep(delay)
        t1 = time.perf_counter()
        _, short_cached = server.prompt_usage(short_text, 1)
        short_s = time.perf_counter() - t1
        _, long_cached = pending.result()
    long_s = done[0] - t0
    if done[0] < t1:
        print(f"  warning: {server.name}: the long request finished ({long_s:.2f} s) before the short one "
              f"was sent ({delay} s): the short one's latency did not wait behind a prefill", flush=True)
    _warn_cached(server, "the long and short requests", long_cached + short_cached, 2)
    return short_s, long_s


WORKLOADS = [  # (label, unit, higher is better, run[, more rows]): a run with more rows, each
    # (label, unit, higher is better), returns a tuple: its own row's value, then theirs
    ("1 stream, 256 new", "tok/s", True, lambda s, seed: concurrent_tok_s(s, 1, 256, seed)),
    ("8 concurrent x 128 new", "tok/s", True, lambda s, seed: concurrent_tok_s(s, 8, 128, seed)),
    ("32 concurrent x 128 new", "tok/s", True, lambda s, seed: concurrent_tok_s(s, 32, 128, seed)),
    ("32 reqs sharing ~1k-token prefix, 8 at a time, 32 new", "s", False,
     lambda s, seed: shared_prefix_s(s, 32, 8, 32, seed)),
    ("8 conversations x 4 turns, 32 new per turn", "s", False, lambda s, seed: multi_turn_s(s, 8, 4, 32, seed)),
    ("1 stream after a ~1.1k-token history, 128 new", "tok/s", True,
     lambda s, seed: long_history_tok_s(s, 1000, 128, seed)),
    ("prefill: 8 distinct ~1k-token prompts one at a time, 1 new", "prompt tok/s", True,
     lambda s, seed: prefill_tok_s(s, 8, 920, seed)),
    ("~16-token request sent 0.3 s into a ~4k-token prefill: its latency", "s", False,
     lambda s, seed: ttft_under_prefill_s(s, 3690, 14, 0.3, seed),
     (("~4k-token prefill itself (with the short request in flight)", "s", False),)),
]


def rows(i: int) -> list[tuple[str, str, bool]]:
    """Workload i's table rows: (label, unit, higher is better)."""
    label, unit, higher, _, *more = WORKLOADS[i]
    return [(label, unit, higher)] + [row for extra in more for row in extra]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", action="append", required=True, metavar="NAME=URL",
                        help="a running OpenAI-compatible server (repeat; measured in this order)")
    parser.add_argument("--baseline", default=None, help="NAME of the server the ratios divide by (default: the last)")
    parser.add_argument("--model", default=None, help="model name to send (default: each server's first /v1/models)")
    parser.add_argument("--only", "--workloads", dest="only", default=None, metavar="N,N",
                        help=f"comma-separated workload numbers (1-{len(WORKLOADS)}) to run, e.g. 7,8")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up requests per server before timing")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--note", default="", help="free text printed with the table (threads, dtype, build)")
    parser.add_argument("--json", default=str(Path(__file__).parent / "out" / "vs_llamacpp.json"))
    args = parser.parse_args(argv)

    servers = []
    for spec in args.server:
        name, sep, url = spec.partition("=")
        if not sep or not url:
            parser.error(f"--server expects NAME=URL, got {spec!r}")
        servers.append(Server(name, url, args.model, args.timeout))
    baseline = args.baseline or servers[-1].name
    if baseline not in {s.name for s in servers}:
        parser.error(f"--baseline {baseline!r} is not one of the --server names")
    chosen = list(range(len(WORKLOADS))) if not args.only else [int(x) - 1 for x in args.only.split(",")]
    if any(not 0 <= i < len(WORKLOADS) for i in chosen):
        parser.error(f"--workloads takes numbers from 1 to {len(WORKLOADS)}, got {args.only!r}")

    results: dict[str, dict[str, float]] = {}
    for server in servers:
        for _ in range(args.warmup):
            server.complete("Hello", 8)
        results[server.name] = {}
        for i in chosen:
            value = WORKLOADS[i][3](server, 1000 + i)
            values = value if isinstance(value, tuple) else (value,)
            for (label, unit, _), v in zip(rows(i), values, strict=True):
                results[server.name][label] = v
                print(f"  {server.name}: {label}: {v:.2f} {unit}", flush=True)

    print(f"\n{platform.machine()} with {platform.os.cpu_count()} cores. {args.note}")
    names = [s.name for s in servers]
    print("| workload | " + " | ".join(names) + " | " +
          " | ".join(f"{n} / {baseline}" for n in names if n != baseline) + " |")
    print("|---|" + "--:|" * (2 * len(names) - 1))
    for label, unit, higher in (row for i in chosen for row in rows(i)):
        base = results[baseline][label]
        cells = [f"{results[n][label]:.1f} {unit}" if unit != "s" or results[n][label] >= 1
                 else f"{results[n][label]:.3f} {unit}" for n in names]
        # NOTE: ratios read "how many times better than the baseline" for both units
        ratios = [f"{(results[n][label] / base if higher else base / results[n][label]):.2f}x"
                  for n in names if n != baseline]
        print(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"baseline": baseline, "note": args.note, "results": results}, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
