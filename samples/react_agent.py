"""A ReAct-style agent step that branches on the chosen action.

The model thinks, then picks an action with a `select`; the program continues differently per
action, which the compiler turns into a BRANCH on `action`:

- search    -> a search query (stops at the closing bracket);
- calculate -> an arithmetic expression (regex-constrained);
- finish    -> the final answer, then a nested `select` of confidence that may add a caveat.

Tools run on the host between steps: the caller executes the planned action, appends the
observation to `history`, and runs the next step (or, for tool calls inside one program, uses
the eager interpreter).
"""
import sglc as sgl

ACTIONS = ["search", "calculate", "finish"]


@sgl.function
def react_agent(s, question, history):
    s += sgl.system("Answer the question by reasoning step by step. Available actions: "
                    "search[query], calculate[expression], finish[answer].")
    s += sgl.user("Question: " + question + "\n" + history)
    with s.assistant():
        s += "Thought: " + sgl.gen("thought", max_tokens=96, stop="\n") + "\n"
        s += "Action: " + sgl.select("action", choices=ACTIONS)
        if s["action"] == "search":
            s += "[" + sgl.gen("query", max_tokens=32, stop="]") + "]"
        elif s["action"] == "calculate":
            s += "[" + sgl.gen("expression", max_tokens=32, regex=r"[0-9+\-*/(). ]{1,40}") + "]"
        else:
            s += "[" + sgl.gen("answer", max_tokens=64, stop="]") + "]\n"
            s += "Confident: " + sgl.select("confident", choices=["yes", "no"])
            if s["confident"] == "no":
                s += "\nCaveat: " + sgl.gen("caveat", max_tokens=48, stop="\n")


if __name__ == "__main__":
    print(react_agent.trace())
