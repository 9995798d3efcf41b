"""Multi-turn chat: a system prompt and three user/assistant turns.

Uses both role forms: `sgl.user(...)` expressions and `with s.assistant():` blocks. Each
assistant turn sees every earlier turn, so the prefix grows turn by turn -- the pattern the
radix cache reuses when the same conversation continues.
"""
import sglc as sgl


@sgl.function
def multi_turn_chat(s, question_1, question_2, question_3):
    s += sgl.system("You are a helpful assistant. Answer briefly and concretely.")
    s += sgl.user(question_1)
    s += sgl.assistant(sgl.gen("answer_1", max_tokens=128))
    s += sgl.user(question_2)
    with s.assistant():
        s += sgl.gen("answer_2", max_tokens=128)
    with s.user():
        s += question_3 + " Please keep it under three sentences."
    s += sgl.assistant(sgl.gen("answer_3", max_tokens=96))


if __name__ == "__main__":
    print(multi_turn_chat.trace())
