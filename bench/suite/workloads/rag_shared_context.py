"""Retrieval-augmented QA with a shared context: several questions over the same retrieved documents.

A constant instruction, then a retrieved context of several documents (an argument identical for
the programs of one group), then the question and an answer gen: the context is the long prefix
the cache shares within a group.
"""
from __future__ import annotations

import random
from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import rng_for, town_document, town_question

NAME = "rag_shared_context"

INSTRUCTION = (
    "Answer the question using only the retrieved documents below. Quote names and numbers exactly as they "
    "appear in the documents, and answer in one short sentence.\n\n"
)

# groups (contexts), questions per group, documents per context, answer tokens
SIZE = {"tiny": (1, 2, 2, 3), "quick": (2, 8, 6, 12), "full": (4, 8, 10, 32)}


def group_inputs(rng: random.Random, questions: int, documents: int) -> list[dict[str, Any]]:
    """The inputs of one group: one retrieved context, `questions` distinct questions about it."""
    docs = [town_document(rng) for _ in range(documents)]
    context = "".join(f"Document {i + 1}: {text}\n\n" for i, (text, _) in enumerate(docs))
    asked: list[str] = []
    while len(asked) < questions:
        question = town_question(rng, rng.choice(docs)[1])
        if question not in asked:
            asked.append(question)
    return [{"context": context, "question": q} for q in asked]


def make_program(answer_tokens: int) -> Any:
    @sgl.function
    def rag_shared_context(s, context, question):
        s += sgl.user(INSTRUCTION + context + "Question: " + question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=answer_tokens))
    return rag_shared_context


def build(size: str, seed: int) -> WorkloadInstance:
    groups, per_group, documents, tokens = by_size(size, SIZE)
    inputs: list[dict[str, Any]] = []
    for g in range(groups):
        inputs += group_inputs(rng_for(NAME, seed, f"group{g}"), per_group, documents)
    warmup = group_inputs(rng_for(NAME, seed, "warmup"), 1, documents)[0]
    return make_instance(make_program(tokens), size, warmup, inputs)


WORKLOAD = Workload(
    name=NAME, title="RAG, shared context",
    shape="1 answer gen per program; a retrieved context of several documents shared by a group of questions",
    prefix_heavy=True, has_forks=False, has_constraints=False, build=build,
)
