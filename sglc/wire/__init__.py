"""sglc.wire: the contract between the compiler half (sglc.frontend / ir / passes / executor) and
the runtime (sglc_runtime). Both import it; it imports neither (only sglc.fsm and sglc.grammar,
the shared constraint libraries). tests/test_import_graph.py fails on any import between the
halves that bypasses it.

- proto/: the generated runtime.proto / graph.proto / fsm.proto modules (scripts/gen_proto.py).
- sampling_table.py: THE sampling parameters (name, type, range, default, each edge's spelling);
  the DSL checks, IR rules, GenParams, SamplingParams and the proto conversion derive from it.
- backend.py: the executor's Backend interface and what crosses it (Prompt, GenParams,
  GenResult, ScoreResult, ModelInfo, CallMeta); the runtime's EngineBackend implements it.
- prompt.py: PromptInput and images on a text-only model; chat_template.py: ChatTemplate and its
  derivation from a jinja template; auth.py: the API key's environment variable.
- json_schema_text.py: JSON-schema normalisation (one rule for every edge);
  constraint_spec.py: ConstraintSpec, a request's constraint with its cache key.
- service_results.py: what the runtime service answers (ScoreOutcome, RuntimeModelInfo).
- pb_values.py, server_convert.py, client_convert.py: every runtime.proto <-> Python conversion;
  fsm_message.py: a lowered FSM <-> the typed sglc.fsm.FSM message (graph.pb and GenerateRequest).
- grammar_message.py: a lowered grammar (sglc.grammar.Grammar) <-> the typed sglc.grammar.Grammar
  message (graph.pb); requests carry a grammar as GBNF text (SamplingParams.ebnf).

Nothing here imports torch; importing the package imports none of its modules.
"""
