"""Tree of thought: propose several plans, carry out each in a few ways, and vote.

A two-level fork: the question forks into NUM_PLANS plans; each plan forks into NUM_SOLUTIONS
attempts that solve the problem following that plan. Each attempt ends with a `select` of its
self-assessed correctness. The attempts are brought back with concatenate-and-append joins, so
the final judge sees the whole tree, and a last `gen` writes the answer.
"""
import sglc as sgl

NUM_PLANS = 3
NUM_SOLUTIONS = 2


@sgl.function
def tree_of_thought(s, question):
    s += sgl.system("You solve math word problems step by step.")
    s += sgl.user_begin() + "Question: " + question + "\n"
    plans = s.fork(NUM_PLANS)
    for i, plan in enumerate(plans):
        plan += "\nPlan " + str(i + 1) + ": " + sgl.gen("plan", max_tokens=64, stop="\n", temperature=0.7)
        attempts = plan.fork(NUM_SOLUTIONS)
        for j, attempt in enumerate(attempts):
            attempt += "\nAttempt " + str(j + 1) + " following the plan: "
            attempt += sgl.gen("solution", max_tokens=128, stop="\n\n", temperature=0.7)
            attempt += "\nIs this attempt correct? " + sgl.select("correct", choices=["yes", "no", "unsure"])
        attempts.join(mode="concate_and_append")
    plans.join(mode="concate_and_append")
    s += "\nConsidering all plans and attempts above, give the final numeric answer."
    s += sgl.user_end()
    s += sgl.assistant("The answer is " + sgl.gen("answer", max_tokens=16, regex=r"-?[0-9]+(\.[0-9]+)?"))


if __name__ == "__main__":
    print(tree_of_thought.trace())
