"""MMLU 5-shot: multiple choice (A/B/C/D) by subject; one `select` per program.

Each subject has five solved examples shared by every question of that subject (the few-shot
block is an argument, identical within a subject), after one constant instruction; questions
are generated from fact tables and arithmetic with a fixed seed.
"""
from __future__ import annotations

import random
from typing import Any, Callable

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import FIRST_NAMES, rng_for

NAME = "mmlu_5shot"
LETTERS = ["A", "B", "C", "D"]

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Canada": "Ottawa", "Peru": "Lima",
            "Norway": "Oslo", "Egypt": "Cairo", "Chile": "Santiago", "Poland": "Warsaw", "Ghana": "Accra",
            "Portugal": "Lisbon", "Vietnam": "Hanoi", "Austria": "Vienna", "Ireland": "Dublin", "Spain": "Madrid",
            "Greece": "Athens", "Sweden": "Stockholm", "Morocco": "Rabat", "Thailand": "Bangkok", "Cuba": "Havana"}
ELEMENTS = {"oxygen": "O", "sodium": "Na", "iron": "Fe", "gold": "Au", "silver": "Ag", "potassium": "K",
            "carbon": "C", "helium": "He", "copper": "Cu", "lead": "Pb", "tin": "Sn", "mercury": "Hg",
            "calcium": "Ca", "zinc": "Zn", "nitrogen": "N", "chlorine": "Cl"}
SYNONYMS = {"rapid": "fast", "ancient": "old", "enormous": "huge", "fragile": "delicate", "brave": "courageous",
            "tiny": "small", "weary": "tired", "glad": "happy", "silent": "quiet", "wealthy": "rich",
            "difficult": "hard", "begin": "start", "shout": "yell", "damp": "wet", "odd": "strange"}
PLANETS = [("closest to the Sun", "Mercury"), ("largest in the Solar System", "Jupiter"),
           ("known as the Red Planet", "Mars"), ("with the most famous rings", "Saturn"),
           ("we live on", "Earth"), ("hottest on its surface", "Venus"), ("farthest from the Sun", "Neptune"),
           ("that rotates on its side", "Uranus"), ("whose largest moon is Titan", "Saturn"),
           ("whose moons are Phobos and Deimos", "Mars"), ("with the Great Red Spot", "Jupiter"),
           ("whose day is longer than its year", "Venus"), ("with the shortest year", "Mercury"),
           ("with liquid water oceans on its surface", "Earth"), ("found in 1846 by calculation", "Neptune"),
           ("first found with a telescope, in 1781", "Uranus"), ("home to the volcano Olympus Mons", "Mars")]


def _from_table(table: dict[str, str], template: str) -> Callable[[random.Random], tuple[str, str, list[str]]]:
    def make(rng: random.Random) -> tuple[str, str, list[str]]:
        key = rng.choice(sorted(table))
        wrong = rng.sample(sorted(v for k, v in table.items() if k != key), 3)
        return template.format(key), table[key], wrong
    return make


def _arithmetic(rng: random.Random) -> tuple[str, str, list[str]]:
    a, b = rng.randint(12, 99), rng.randint(3, 19)
    op, value = rng.choice([("plus", a + b), ("minus", a - b), ("times", a * b)])
    wrong = rng.sample([value + d for d in (-10, -2, -1, 1, 2, 3, 10)], 3)
    return f"What is {a} {op} {b}?", str(value), [str(w) for w in wrong]


def _units(rng: random.Random) -> tuple[str, str, list[str]]:
    n = rng.randint(2, 30)
    unit, per, small = rng.choice([("meters", 100, "centimeters"), ("hours", 60, "minutes"),
                                   ("kilograms", 1000, "grams"), ("weeks", 7, "days"), ("minutes", 60, "seconds")])
    wrong = rng.sample([n * per + per, n * per - per, n * per * 10, n + per, n * (per // 2 or 1)], 3)
    return f"How many {small} are there in {n} {unit}?", str(n * per), [str(w) for w in wrong]


def _planets(rng: random.Random) -> tuple[str, str, list[str]]:
    clue, answer = rng.choice(PLANETS)
    wrong = rng.sample(sorted({p for _, p in PLANETS} - {answer}), 3)
    return f"Which planet is the one {clue}?", answer, wrong


SUBJECTS: dict[str, Callable[[random.Random], tuple[str, str, list[str]]]] = {
    "world geography": _from_table(CAPITALS, "What is the capital city of {}?"),
    "chemistry": _from_table(ELEMENTS, "What is the chemical symbol of {}?"),
    "english vocabulary": _from_table(SYNONYMS, "Which word is closest in meaning to '{}'?"),
    "elementary mathematics": _arithmetic,
    "units and measures": _units,
    "astronomy": _planets,
}

# subjects (one per group; the warm-up uses one more), questions per subject
SIZE = {"tiny": (1, 2), "quick": (2, 4), "full": (4, 8)}


LEADS = [
    "{name} is studying for an exam and finds this question in an old workbook. ",
    "During a class quiz, the teacher reads the following question aloud and asks {name} to answer it. ",
    "While preparing a lesson, {name} writes down a question to check what the students remember. ",
    "A question from last year's final exam, which {name} got wrong at the time. ",
]


def format_question(rng: random.Random, item: tuple[str, str, list[str]]) -> tuple[str, str]:
    """The question (after a short lead-in) with lettered options, and the letter of the right answer."""
    question, answer, wrong = item
    question = rng.choice(LEADS).format(name=rng.choice(FIRST_NAMES)) + question
    options = wrong + [answer]
    rng.shuffle(options)
    lines = [question] + [f"{letter}. {option}" for letter, option in zip(LETTERS, options)]
    return "\n".join(lines), LETTERS[options.index(answer)]


def subject_items(rng: random.Random, subject: str, count: int) -> list[tuple[str, str]]:
    """`count` distinct formatted questions of one subject."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for _ in range(1000):
        text, letter = format_question(rng, SUBJECTS[subject](rng))
        stem = text.split("\n")[0].split(". ")[-1]
        if stem not in seen:
            seen.add(stem)
            out.append((text, letter))
        if len(out) == count:
            return out
    raise RuntimeError(f"could not draw {count} distinct questions for {subject!r}")


def group_inputs(rng: random.Random, subject: str, questions: int) -> list[dict[str, Any]]:
    """The inputs of one subject: five shared solved examples, then `questions` new questions."""
    items = subject_items(rng, subject, 5 + questions)
    shots = "".join(f"{text}\nAnswer: {letter}\n\n" for text, letter in items[:5])
    header = f"The following are multiple choice questions (with answers) about {subject}.\n\n"
    return [{"examples": header + shots, "question": text} for text, _ in items[5:]]


@sgl.function
def mmlu_5shot(s, examples, question):
    s += "You are taking an exam. Read each question and choose the one correct option.\n\n"
    s += examples + question + "\nAnswer: "
    s += sgl.select("answer", choices=LETTERS)


def build(size: str, seed: int) -> WorkloadInstance:
    num_subjects, per_subject = by_size(size, SIZE)
    rng = rng_for(NAME, seed, "subjects")
    subjects = rng.sample(sorted(SUBJECTS), num_subjects + 1)
    inputs: list[dict[str, Any]] = []
    for subject in subjects[:-1]:
        inputs += group_inputs(rng_for(NAME, seed, subject), subject, per_subject)
    warmup = group_inputs(rng_for(NAME, seed, "warmup"), subjects[-1], 1)[0]
    return make_instance(mmlu_5shot, size, warmup, inputs)


WORKLOAD = Workload(
    name=NAME, title="MMLU 5-shot",
    shape="1 select (A-D) per program; 5 solved examples shared by all questions of a subject",
    prefix_heavy=True, has_forks=False, has_constraints=False, build=build,
)
