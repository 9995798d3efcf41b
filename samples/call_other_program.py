"""A program that calls another program: a research brief built from cited answers.

`answer_with_citation` is an ordinary @sgl.function (traceable on its own). Called as
`answer_with_citation(s, ...)` from inside `research_brief`, it is inlined into the caller's
state: its nodes join the same graph and stream, keeping their own source lines. Each call
defines the variable `answer` again; the caller keeps each result in a Python variable right
after the call, so later text can quote both.

This file holds two programs; compile the outer one by name:
    sglc compile samples/call_other_program.py:research_brief -o brief.pb
"""
import sglc as sgl


@sgl.function
def answer_with_citation(s, question):
    s += sgl.user(question + " Answer in one sentence and cite one well-known source.")
    s += sgl.assistant(sgl.gen("answer", max_tokens=96, stop="\n\n"))


@sgl.function
def research_brief(s, topic):
    s += sgl.system("You write short, factual research briefs.")
    answer_with_citation(s, "What is " + topic + "?")
    definition = s["answer"]
    answer_with_citation(s, "Why does " + topic + " matter today?")
    importance = s["answer"]
    s += sgl.user("Write a two-sentence brief on " + topic + " that combines:\n- " + definition
                  + "\n- " + importance)
    s += sgl.assistant(sgl.gen("brief", max_tokens=96))


if __name__ == "__main__":
    print(research_brief.trace())
