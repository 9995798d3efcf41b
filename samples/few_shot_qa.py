"""Few-shot question answering: a fixed block of solved examples, then the new question.

The examples are module constants, so tracing turns them into one long constant prefix that every
input shares (what the runtime's radix cache reuses across a batch). The answer stops at the end
of the line, like SGLang's few-shot benchmarks.
"""
import sglc as sgl

EXAMPLES = [
    ("What is the capital of France?", "Paris"),
    ("How many legs does a spider have?", "Eight"),
    ("Which planet is known as the Red Planet?", "Mars"),
    ("What is the boiling point of water at sea level in Celsius?", "100 degrees"),
    ("Who wrote 'Romeo and Juliet'?", "William Shakespeare"),
]


@sgl.function
def few_shot_qa(s, question):
    s += "Answer each question with a short phrase.\n\n"
    for q, a in EXAMPLES:
        s += "Question: " + q + "\nAnswer: " + a + "\n\n"
    s += "Question: " + question + "\nAnswer: "
    s += sgl.gen("answer", max_tokens=32, stop="\n", temperature=0)


if __name__ == "__main__":
    print(few_shot_qa.trace())
