"""Support for the executor tests (no tests here): a deterministic scripted Backend.

ScriptedBackend is a legitimate test double for the EXECUTOR'S OWN LOGIC — ordering, concurrency,
skipping, joins, roles, result assembly — where the model's answers do not matter, only that they
are deterministic functions of the prompt. Everything about the model itself (generation, scoring,
caching) is tested against the real engine in the @pytest.mark.model tests.
"""
from __future__ import annotations

import hashlib
import threading
from typing import Callable, Optional

from sglc.fsm.dtypes import REGEX_INT
from sglc.wire.backend import (
    Backend,
    CallMeta,
    ChatTemplate,
    ChoiceLogprobs,
    GenParams,
    GenResult,
    ModelInfo,
    Prompt,
    ScoreResult,
)

CHATML = ChatTemplate(
    role_prefix={r: f"<|im_start|>{r}\n" for r in ("system", "user", "assistant")},
    role_suffix={r: "<|im_end|>\n" for r in ("system", "user", "assistant")},
    generation_prefix="<|im_start|>assistant\n",
)

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def default_reply(prompt: Prompt, params: GenParams) -> str:
    """A word chosen by the prompt's hash (the same prompt always gives the same word)."""
    if params.regex == REGEX_INT or (params.fsm or {}).get("pattern") == REGEX_INT:
        return str(digest(prompt.text) % 100)
    return " " + WORDS[digest(prompt.text) % len(WORDS)]


def default_scores(prompt: Prompt, choice: str) -> list[float]:
    """Per-token logprobs of a choice (one 'token' per character), a function of prompt + choice."""
    return [-((digest(prompt.text + choice + str(i)) % 1000) / 250.0) for i in range(len(choice))]


class ScriptedBackend(Backend):
    """Answers gen with `reply(prompt, params)` and select with `scores(prompt, choice)`.

    Records every call (`calls`: (kind, prompt text)), the most calls in flight at once
    (`max_in_flight`), and runs `on_call(kind, prompt)` inside each call (barriers, events,
    injected failures).
    """

    def __init__(self, reply: Callable[[Prompt, GenParams], str] = default_reply,
                 scores: Callable[[Prompt, str], list[float]] = default_scores,
                 template: Optional[ChatTemplate] = CHATML,
                 on_call: Optional[Callable[[str, Prompt], None]] = None,
                 supports_images: bool = False) -> None:
        self.reply = reply
        self.scores = scores
        self.template = template
        self.on_call = on_call
        self.supports_images = supports_images
        self.calls: list[tuple[str, str]] = []
        self.params: list[GenParams] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def model_info(self) -> ModelInfo:
        return ModelInfo("scripted", 4096, self.template, self.supports_images)

    def _enter(self, kind: str, prompt: Prompt) -> None:
        with self._lock:
            self.calls.append((kind, prompt.text))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _hook(self, kind: str, prompt: Prompt) -> None:
        if self.on_call is not None:
            self.on_call(kind, prompt)

    def generate(self, prompt: Prompt, params: GenParams) -> GenResult:
        self._enter("gen", prompt)
        try:
            with self._lock:
                self.params.append(params)
            self._hook("gen", prompt)
            text = self.reply(prompt, params)
            return GenResult(text, CallMeta(prompt_tokens=len(prompt.text), completion_tokens=len(text),
                                            finish_reason={"type": "stop", "matched": None}))
        finally:
            self._leave()

    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        self._enter("select", prompt)
        try:
            self._hook("select", prompt)
            out = []
            for c in choices:
                lp = ChoiceLogprobs(self.scores(prompt, c))
                if unconditional:
                    lp.unconditional_logprobs = self.scores(Prompt(""), c)
                out.append(lp)
            return ScoreResult(out, CallMeta(prompt_tokens=len(prompt.text)))
        finally:
            self._leave()

    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        self._enter("cache_prefix", prompt)
        try:
            self._hook("cache_prefix", prompt)
            return CallMeta(prompt_tokens=len(prompt.text))
        finally:
            self._leave()

    def kinds(self) -> list[str]:
        with self._lock:
            return [k for k, _ in self.calls]


# ----- programs that both execution modes run (eager vs compiled equivalence tests) -----
import sglc as sgl  # noqa: E402


@sgl.function
def chat_select(s, question):
    s += sgl.system("You are a careful assistant.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=6))
    s += sgl.user("Is your answer correct? Reply yes or no.")
    s += sgl.assistant(sgl.select("verdict", choices=["yes", "no"]))


@sgl.function
def fork_gather(s, topic):
    s += "Topic: " + topic + ".\n"
    forks = s.fork(3)
    for i, f in enumerate(forks):
        f += "Angle " + str(i + 1) + ":"
        f += sgl.gen("idea", max_tokens=5, stop="\n")
    forks.join()
    s += "Best angle: " + forks[1]["idea"] + "\nSummary:" + sgl.gen("summary", max_tokens=5, stop="\n")


@sgl.function
def tree_concat(s, question):
    s += "Question: " + question + "\n"
    plans = s.fork(2)
    for i, plan in enumerate(plans):
        plan += "Plan " + str(i) + ":" + sgl.gen("plan", max_tokens=4, stop="\n")
        tries = plan.fork(2)
        for j, t in enumerate(tries):
            t += "\nTry " + str(j) + ":" + sgl.gen("try", max_tokens=4, stop="\n")
        tries.join(mode="concate_and_append")
    plans.join(mode="concate_and_append")
    s += "\nAnswer:" + sgl.gen("answer", max_tokens=4, stop="\n")


@sgl.function
def branch_on_select(s, claim):
    s += sgl.user("Claim: " + claim + "\nIs the claim true?")
    s += sgl.assistant(sgl.select("truth", choices=["true", "false"]))
    if s["truth"] == "true":
        s += sgl.user("Give one supporting fact.")
        s += sgl.assistant(sgl.gen("support", max_tokens=6))
    else:
        s += sgl.user("Correct the claim.")
        s += sgl.assistant(sgl.gen("correction", max_tokens=6))


@sgl.function
def scoped_and_typed(s, item):
    with s.var_scope("intro"):
        s += "Item: " + item + "."
    s += " Quantity: " + sgl.gen("count", dtype=int, max_tokens=3) + "."
    forks = s.fork(2)
    for f in forks:
        f += " Recall the intro: " + f["intro"] + " Note:" + sgl.gen("note", max_tokens=3, stop="\n")
    forks.join()


@sgl.function
def regex_gen(s, name):
    s += "Person: " + name + "\nAge (digits): " + sgl.gen("age", max_tokens=4, regex=r"[1-9][0-9]?")
    s += "\nCity: " + sgl.gen("city", max_tokens=8, regex=r"[A-Z][a-z]+")


@sgl.function
def typed_then_quoted(s, task):
    """SGLang's typed-gen shape: the int gen's value is text, appended again later."""
    s += "Task: " + task + "\nHours (a number): " + sgl.gen("hours", dtype=int, max_tokens=3)
    s += "\nSo " + s["hours"] + " hours means:" + sgl.gen("meaning", max_tokens=5, stop="\n")


@sgl.function
def hellaswag_choices_argument(s, context, endings):
    """The paper's HellaSwag shape: the endings are an input, so the select's choices are too."""
    s += "Pick the most plausible ending.\nContext: " + context + "\nEnding:"
    s += sgl.select("ending", choices=endings)
    s += "\nWhy:" + sgl.gen("why", max_tokens=5, stop="\n")


@sgl.function
def expand_tip(s, topic, tip):
    s += "Topic: " + topic + "\nTip: " + tip + "\nExplain the tip in one sentence:"
    s += sgl.gen("detail", max_tokens=10, stop="\n")


@sgl.function
def tips_with_details(s, topic):
    """A program calling a program (SGLang's `d = expand_tip(...)`; `s += d["detail"]`)."""
    s += "Give two tips about " + topic + ".\n1." + sgl.gen("tip_1", max_tokens=8, stop="\n")
    s += "\n2." + sgl.gen("tip_2", max_tokens=8, stop="\n")
    first = expand_tip(topic=topic, tip=s["tip_1"])
    second = expand_tip(topic=topic, tip=s["tip_2"])
    s += "\nDetails:\n- " + first["detail"] + "\n- " + second["detail"]


EQUIVALENCE_CASES = [
    (chat_select, {"question": "What is the capital of Italy?"}),
    (fork_gather, {"topic": "city gardens"}),
    (tree_concat, {"question": "What is 12 + 30?"}),
    (branch_on_select, {"claim": "Water boils at 100 degrees Celsius at sea level."}),
    (scoped_and_typed, {"item": "apples"}),
    (typed_then_quoted, {"task": "Paint a small fence."}),
    (hellaswag_choices_argument, {"context": "She poured the tea into the cup and",
                                  "endings": [" drank it slowly.", " drove to the moon.", " folded the river."]}),
    (tips_with_details, {"topic": "brewing tea"}),
]
