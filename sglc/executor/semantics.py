"""The meaning of every primitive, in one place: the graph executor and the eager sink both call
these methods, so compiled and eager execution cannot drift apart.

A :class:`Semantics` binds a backend (and run-level sampling defaults) to the operations on a
:class:`StreamState`: text, roles (rendered with the backend's chat template), media, gen,
select, var scopes, fork and join. Model calls return a :class:`CallRecord` for the results.

API speculative execution is per program run: a run calls :meth:`Semantics.speculation` once and
passes the state to each :meth:`Semantics.gen`. A backend that speculates (the openai backend)
has ``new_speculation(n) -> state | None`` and takes ``generate(prompt, params, speculation=state)``;
other backends ignore ``num_api_spec_tokens``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from typing import Any, Callable, ContextManager, Optional, Sequence

from sglc.executor import select_methods
from sglc.executor.results import CallRecord
from sglc.executor.stream_state import StreamState
from sglc.ir.gen_constraint import constraint_grammar
from sglc.wire import sampling_table
from sglc.wire.backend import Backend, ChatTemplate, GenParams, LogprobRequest, ModelInfo, Prompt
from sglc.wire.json_schema_text import schema_text
from sglc.wire.program_hint import ProgramHint

log = logging.getLogger("sglc.executor")

#: SGLang's defaults for a gen's sampling (SglFunction.run's keyword defaults), by GenParams field.
DEFAULT_SAMPLING: dict[str, Any] = dict(sampling_table.RUN_DEFAULTS)

#: Run-level keyword (SGLang's `run(..., max_new_tokens=...)` names) -> GenParams field.
RUN_SAMPLING_KEYS = {key: row.name for key, row in sampling_table.BY_RUN.items()}

#: GEN attributes that are sampling parameters (same names as GenParams fields).
_GEN_SAMPLING_ATTRS = tuple(sampling_table.GEN_FIELDS)


#: SGLang's run() keywords that ask every gen for logprobs (a gen's own parameters win); kept in the
#: run-level defaults under these names, apart from the GenParams fields.
RUN_LOGPROB_KEYS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")


def sampling_defaults(run_kwargs: dict[str, Any]) -> dict[str, Any]:
    """GenParams defaults from SGLang-style run keywords (`max_new_tokens`, `temperature`, ...), and
    the logprob keywords (`return_logprob=True`, ...) under their own names."""
    out: dict[str, Any] = {}
    for key, value in run_kwargs.items():
        if key in RUN_LOGPROB_KEYS:
            if value is not None:
                out[key] = sampling_table.BY_DSL[key].check_gen(value, f"run {key}")
            continue
        if key not in RUN_SAMPLING_KEYS:
            raise TypeError(f"unknown sampling keyword {key!r}; known: {', '.join(RUN_SAMPLING_KEYS)}")
        if value is not None:
            out[RUN_SAMPLING_KEYS[key]] = value  # NOTE: a str for a list is made one in gen_params
    return out


class Semantics:
    """Primitive operations over stream states, executed on one backend. Thread-safe."""

    def __init__(self, backend: Backend, defaults: Optional[dict[str, Any]] = None,
                 seed: Optional[int] = None, num_api_spec_tokens: Optional[int] = None) -> None:
        self.backend = backend
        #: The program's ``@sgl.function(num_api_spec_tokens=N)`` (None: the backend's default).
        self.num_api_spec_tokens = num_api_spec_tokens
        defaults = dict(defaults or {})
        #: run(return_logprob=True, ...): every gen asks for logprobs unless it says otherwise
        self.logprob_defaults = {k: defaults.pop(k) for k in RUN_LOGPROB_KEYS if k in defaults}
        self.defaults = {**DEFAULT_SAMPLING, **defaults}
        self._info: Optional[ModelInfo] = None
        self._lock = threading.Lock()
        self._warned_media = False
        self._rng = random.Random(seed)

    # ----- model facts -----
    def model_info(self) -> ModelInfo:
        with self._lock:
            if self._info is None:
                self._info = self.backend.model_info()
            return self._info

    @property
    def chat_template(self) -> Optional[ChatTemplate]:
        return self.model_info().chat_template

    # ----- text, roles, media -----
    def append_text(self, st: StreamState, text: str) -> None:
        st.append(text)

    def append_value(self, st: StreamState, value: Any) -> None:
        if isinstance(value, (list, dict)) or value is None:
            raise TypeError(f"cannot append a {type(value).__name__} to a prompt")
        st.append(value if isinstance(value, str) else str(value))

    def role_begin(self, st: StreamState, role: str) -> None:
        template = self.chat_template
        st.open_role(role, template.role_prefix.get(role, "") if template else "")

    def role_end(self, st: StreamState, role: str) -> None:
        template = self.chat_template
        st.close_role(role, template.role_suffix.get(role, "") if template else "")

    def media(self, st: StreamState, kind: str, path: Any, num_frames: Optional[int] = None) -> None:
        """IMAGE / VIDEO: recorded in the prompt's media and the open role's message content."""
        if not isinstance(path, str) or not path:
            raise TypeError(f"an {kind} path must be a non-empty str, got {path!r}")
        if "://" not in path and not path.startswith("data:") and not os.path.exists(path):
            raise FileNotFoundError(f"{kind} file {path!r} not found (relative to {os.getcwd()})")
        if not self.model_info().supports_images:
            with self._lock:
                warn, self._warned_media = not self._warned_media, True
            if warn:
                log.warning("model %s does not accept images or videos: the backend shows each as the text "
                            "'<image: NAME>' (first: %s %s)", self.model_info().model, kind, path)
        extra = {"num_frames": num_frames} if num_frames is not None else {}
        st.add_media(kind, path, **extra)

    # ----- model calls -----
    def speculation(self) -> Any:
        """A fresh API speculation state for one program run, or None (backend cannot / not asked)."""
        factory = getattr(self.backend, "new_speculation", None)
        return factory(self.num_api_spec_tokens) if callable(factory) else None

    def gen_params(self, attrs: dict[str, Any]) -> GenParams:
        """Sampling parameters for a GEN: its attrs over the run's defaults; its constraint."""
        values = {k: v for k, v in self.defaults.items()}
        values.update({k: attrs[k] for k in _GEN_SAMPLING_ATTRS if attrs.get(k) is not None})
        for key, value in values.items():  # NOTE: a str stop (or stop_regex) is a one-item list
            if isinstance(value, str) and sampling_table.GEN_FIELDS[key].kind == "str_list":
                values[key] = [value]
        params = GenParams(**values)
        fsm, grammar = attrs.get("fsm"), attrs.get("grammar")
        if fsm is not None:
            params.fsm = fsm
        elif grammar is not None:  # NOTE: lowered at compile time; sent as GBNF text (ConstraintSpec "ebnf")
            params.ebnf = grammar.to_ebnf()
            if attrs.get("json_schema") is not None:  # a recursive schema: API backends send the schema
                params.ebnf_from_json_schema = schema_text(attrs["json_schema"])
        elif attrs.get("ebnf") is not None:  # NOTE: not lowered (eager run(), a cache() graph): as written
            params.ebnf = attrs["ebnf"]
        elif attrs.get("lark") is not None:
            params.ebnf = constraint_grammar("lark", attrs["lark"]).to_ebnf()
        elif attrs.get("regex") is not None:
            params.regex = attrs["regex"]
        elif attrs.get("json_schema") is not None:
            params.json_schema = schema_text(attrs["json_schema"])
        elif attrs.get("dtype") is not None:
            from sglc import fsm as fsm_lib

            params.regex = fsm_lib.regex_for_dtype(attrs["dtype"])
        asked = {**self.logprob_defaults, **{k: attrs[k] for k in RUN_LOGPROB_KEYS if attrs.get(k) is not None}}
        if asked.get("return_logprob") or (asked.get("top_logprobs_num") or 0) > 0:
            start = asked.get("logprob_start_len")
            params.logprobs = LogprobRequest(int(asked.get("top_logprobs_num") or 0), -1 if start is None else int(start))
        return params

    def gen(self, st: StreamState, attrs: dict[str, Any], node: str,
            guard: ContextManager[Any] = contextlib.nullcontext(), speculation: Any = None,
            on_text: Optional[Callable[[str], None]] = None, hint: Optional[ProgramHint] = None) -> tuple[Any, CallRecord]:
        """Generate after the stream's text, append the text, define the variable as that text
        (a dtype only constrains the generation; SGLang stores the string too).

        `guard` is held while `st` changes (the graph executor passes its run lock, so a result
        snapshot never sees a half-applied call). `speculation`: the run's state from
        :meth:`speculation` (None: a plain call). `on_text`: streaming (`run(stream=True)`) —
        the text goes there piece by piece as the backend produces it. `hint`: the call's program
        hint (graph executor, program_hints.py), carried on the prompt.
        """
        name = attrs["name"]
        params = self.gen_params(attrs)
        prompt = _hinted(st, hint)
        t0 = time.perf_counter()
        if speculation is not None:  # NOTE: a speculated gen is cut from a longer call: not streamed
            result = self.backend.generate(prompt, params, speculation=speculation)  # type: ignore[call-arg]
            if on_text is not None:
                on_text(result.text)
        elif on_text is not None:
            result = self.backend.generate_stream(prompt, params, on_text)
        else:
            result = self.backend.generate(prompt, params)
        latency = time.perf_counter() - t0
        self.backend.add_token_usage(result.meta)
        value = trim_at_first_stop(result.text, params)
        record = CallRecord.of(node, st.stream_id, "gen", result.meta, latency)
        with guard:
            st.append(value)
            st.define(name, value, record.meta_info())
        return value, record

    def select(self, st: StreamState, attrs: dict[str, Any], node: str,
               guard: ContextManager[Any] = contextlib.nullcontext(),
               hint: Optional[ProgramHint] = None) -> tuple[str, CallRecord]:
        """Score every choice after the stream's text, pick one by the method, append it."""
        name = attrs["name"]
        choices = attrs["choices"]
        if (not isinstance(choices, (list, tuple)) or not choices or not all(isinstance(c, str) for c in choices)
                or len(set(choices)) != len(choices)):  # NOTE: choices from an argument arrive unchecked
            raise ValueError(f"select choices must be a non-empty list of distinct strings, got {choices!r}"[:300])
        choices = list(choices)
        method = attrs.get("choices_method") or "token_length_normalized"
        unconditional = select_methods.needs_unconditional(method)
        t0 = time.perf_counter()
        scored = self.backend.score(_hinted(st, hint), choices, unconditional=unconditional)
        latency = time.perf_counter() - t0
        self.backend.add_token_usage(scored.meta)
        if len(scored.choices) != len(choices):
            raise ValueError(f"the backend scored {len(scored.choices)} of {len(choices)} choices")
        logprobs = [c.token_logprobs for c in scored.choices]
        uncond = [c.unconditional_logprobs or [] for c in scored.choices] if unconditional else None
        with self._lock:
            decision = select_methods.decide(method, logprobs, uncond, float(attrs.get("temperature") or 0.0),
                                             self._rng)
        choice = choices[decision.index]
        record = CallRecord.of(node, st.stream_id, "select", scored.meta, latency)
        meta = record.meta_info()
        meta.update({"normalized_prompt_logprobs": decision.scores, "choice_token_logprobs": logprobs})
        with guard:
            st.append(choice)
            st.define(name, choice, meta)
        return choice, record

    def cache_prefix(self, st: StreamState, node: str, hint: Optional[ProgramHint] = None) -> CallRecord:
        """The fork hint: ask the backend to prefill and keep the stream's text so far."""
        t0 = time.perf_counter()
        meta = self.backend.cache_prefix(_hinted(st, hint))
        return CallRecord.of(node, st.stream_id, "cache_prefix", meta, time.perf_counter() - t0)

    # ----- scopes -----
    def var_scope_begin(self, st: StreamState, name: str) -> None:
        st.begin_scope(name)

    def var_scope_end(self, st: StreamState, name: str) -> str:
        return st.end_scope(name)

    # ----- streams -----
    def fork(self, st: StreamState, stream_ids: Sequence[int]) -> list[StreamState]:
        """Children that start with a copy of `st` (text, messages, role, variables) now."""
        return [st.fork_copy(i) for i in stream_ids]

    def join(self, parent: StreamState, children: Sequence[StreamState], mode: str,
             variables: Optional[Sequence[str]] = None, passthrough: bool = False) -> dict[str, list[Any]]:
        """Bring a fork's children back into `parent`; returns the gathered lists by name.

        gather_variable: ``parent[name] = [child[name] for child]`` for each name in `variables`
        (None: every variable a child defined that the parent does not have, as the tracer
        decides). ``passthrough`` (a one-way fork made by prefix hoisting): the child's new
        variables are copied as they are. concate_and_append: each child's new text is appended.
        """
        if mode == "concate_and_append":
            for child in children:
                parent.append(child.new_text())
            return {}
        if mode != "gather_variable":
            raise ValueError(f"unknown join mode {mode!r}")
        if passthrough:
            for child in children:
                for name in child.defined:
                    parent.define(name, child.variables[name], child.meta_info.get(name))
            return {}
        names = list(variables) if variables is not None else gather_names(parent, children)
        gathered = {name: [c.variables.get(name) for c in children] for name in names}
        for name, values in gathered.items():
            parent.define(name, values)
        return gathered


def _hinted(st: StreamState, hint: Optional[ProgramHint]) -> Prompt:
    """The stream's prompt now, carrying the call's program hint (None: none)."""
    prompt = st.prompt()
    prompt.hint = hint
    return prompt


def trim_at_first_stop(text: str, params: GenParams) -> str:
    """SGLang's text of a gen with both ``min_new_tokens`` and ``stop``: cut before the first
    match of a stop string (SGLang's scheduler lets a stop string end the gen before min_tokens
    and its detokenizer trims at the first match). Our runtime holds stops back until
    min_new_tokens tokens exist, so its text can hold an earlier match: cut there. A no-op
    without min_new_tokens (a runtime stop already ends the text at its first match)."""
    if not params.min_new_tokens or not params.stop:
        return text
    stops = [params.stop] if isinstance(params.stop, str) else params.stop
    hits = [i for i in (text.find(s) for s in stops if s) if i != -1]
    return text[:min(hits)] if hits else text


def gather_names(parent: StreamState, children: Sequence[StreamState]) -> list[str]:
    """Variables a gather join brings back: defined by a child since the fork, unknown to the parent."""
    names: list[str] = []
    for child in children:
        names += [n for n in child.defined if n not in parent.variables and n not in names]
    return names
