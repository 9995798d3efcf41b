"""Essay judge: the running example of the SGLang paper (multi-dimensional judging).

An essay comes with an image. The model first decides whether the essay is related to the image
(a `select`); an unrelated essay ends the program early. Otherwise three judgments on different
dimensions run in parallel (a 3-way fork), are merged into the conversation, summarized, and
turned into a verdict whose shape a regex guarantees.

Compiled, the graph shows: the BRANCH on `related`, the FORK with three child streams that each
generate a `judgment`, the JOIN, the VARIABLE reads that merge the judgments, and the
regex-constrained `verdict`.

    sglc compile samples/essay_judge.py -o essay_judge.pb && sglc inspect essay_judge.pb
"""
import sglc as sgl

DIMENSIONS = ["Clarity", "Originality", "Evidence"]
VERDICT_REGEX = r'\{"grade": "[ABCDF]", "summary": "[^"]{1,100}"\}'


@sgl.function
def essay_judge(s, image_path, essay):
    s += sgl.system("You are a fair, precise writing teacher who grades student essays.")
    s += sgl.user(sgl.image(image_path) + "Here is an essay about the picture above:\n" + essay)
    s += sgl.assistant("I have read the essay and looked at the picture.")
    s += sgl.user("Is the essay related to the picture? Answer yes or no.")
    s += sgl.assistant(sgl.select("related", choices=["yes", "no"]))
    if s["related"] == "no":
        return

    forks = s.fork(len(DIMENSIONS))
    for f, dimension in zip(forks, DIMENSIONS):
        f += sgl.user("Evaluate the essay on one dimension: " + dimension
                      + ". Write two sentences and end with the word END.")
        f += sgl.assistant("Judgment: " + sgl.gen("judgment", max_tokens=96, stop="END"))
    forks.join()

    s += sgl.user("Here are the judgments of the essay on each dimension.")
    with s.assistant():
        for f, dimension in zip(forks, DIMENSIONS):
            s += dimension + ": " + f["judgment"] + "\n"
        s += "In summary, " + sgl.gen("summary", max_tokens=64, stop=".") + "."
    s += sgl.user("Give your final verdict as JSON with a letter grade and a one-line summary.")
    s += sgl.assistant(sgl.gen("verdict", max_tokens=80, regex=VERDICT_REGEX))


if __name__ == "__main__":
    print(essay_judge.trace())
