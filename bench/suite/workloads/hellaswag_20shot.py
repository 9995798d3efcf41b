"""HellaSwag 20-shot: pick the most plausible ending of an everyday scene; one `select` per program.

Twenty solved examples (context + right ending) are a constant block shared by every question;
each question gives a context, and a `select` scores four candidate ending sentences by
likelihood (the right one and three endings of other scenes).
"""
from __future__ import annotations

import random
from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import rng_for

NAME = "hellaswag_20shot"

ACTORS = ["A man", "A woman", "A young girl", "A boy", "An old man", "A teenager", "A chef", "A coach"]
# (scene that ends mid-sentence with the actor as subject, the natural continuation)
SCENES = [
    ("is standing in a kitchen behind a cutting board with a pile of onions. The person",
     "slices the onions into thin rings and drops them into a hot pan."),
    ("kneels next to a flat bicycle tire in a garage. The person",
     "pulls the inner tube out and checks it for a small hole."),
    ("walks onto a frozen pond wearing skates. The person",
     "pushes off gently and glides in a wide circle across the ice."),
    ("holds a paint roller in front of a bare white wall. The person",
     "dips the roller in the tray and spreads blue paint in long strokes."),
    ("stands at the edge of a swimming pool in goggles. The person",
     "dives into the water and swims a fast lap to the far wall."),
    ("sits at a piano with a sheet of music open. The person",
     "places both hands on the keys and begins to play a slow melody."),
    ("is in a garden holding a shovel next to a young tree. The person",
     "digs a deep hole and lowers the tree's roots into the soil."),
    ("carries a basket of wet laundry into the backyard. The person",
     "hangs the shirts one by one on the line with wooden pegs."),
    ("stands behind a counter with a bowl of flour and eggs. The person",
     "whisks the eggs, pours them into the flour and kneads a smooth dough."),
    ("is at the front of a classroom holding a piece of chalk. The person",
     "writes the date on the board and turns to greet the students."),
    ("kneels on a yoga mat in a quiet room. The person",
     "stretches both arms forward and slowly lowers the forehead to the mat."),
    ("is on a tennis court bouncing a ball. The person",
     "tosses the ball high and hits a hard serve over the net."),
    ("stands by a car with the hood open and a bottle of oil. The person",
     "unscrews the cap and pours the oil carefully into the engine."),
    ("sits on a bench with a guitar resting on one knee. The person",
     "tunes the strings and strums a few soft chords."),
    ("is in a bathroom in front of a mirror with a toothbrush. The person",
     "squeezes toothpaste onto the brush and brushes the back teeth."),
    ("stands at a grill in a park with a plate of burgers. The person",
     "lays the patties on the hot grate and flips them after a minute."),
    ("is on a ladder next to a wall with a hammer and a picture frame. The person",
     "taps a nail into the wall and hangs the frame straight."),
    ("waits at the top of a snowy slope on a snowboard. The person",
     "leans forward and carves down the hill in smooth turns."),
    ("kneels beside a dog holding a towel and a bucket of soapy water. The person",
     "scrubs the dog's fur and rinses the suds away with clean water."),
    ("stands in a gym in front of a barbell on the floor. The person",
     "grips the bar, keeps the back straight and lifts it to the hips."),
    ("sits at a sewing machine with two pieces of cloth. The person",
     "lines up the edges and runs a straight seam along the side."),
    ("is in a field flying a red kite on a windy day. The person",
     "lets out more string and the kite climbs high above the trees."),
    ("stands at a sink full of dirty dishes. The person",
     "scrubs each plate with a sponge and stacks it on the drying rack."),
    ("is on a rowing machine in a quiet gym. The person",
     "pushes back with the legs and pulls the handle toward the chest."),
    ("sits at a desk with a stack of envelopes and stamps. The person",
     "folds each letter, seals the envelope and presses a stamp on the corner."),
    ("is in a bakery taking a tray out of the oven. The person",
     "sets the hot loaves on a rack to cool and dusts them with flour."),
    ("stands on a beach holding a surfboard. The person",
     "paddles out past the waves and stands up as a wave lifts the board."),
    ("is in a living room with a vacuum cleaner. The person",
     "switches it on and pushes it slowly across the carpet."),
]

# programs, few-shot examples
SIZE = {"tiny": (2, 5), "quick": (6, 20), "full": (32, 20)}
WHEN = ["On a rainy evening", "On a sunny morning", "Late at night", "Early on a Sunday", "On a windy afternoon",
           "Just after lunch", "On a cold winter day", "During a summer holiday"]


def context_of(actor: str, when: str, scene_index: int) -> str:
    actor = actor[0].lower() + actor[1:]
    return f"{when}, {actor} {SCENES[scene_index][0]}"


def shots_text(rng: random.Random, scene_indices: list[int]) -> str:
    """The solved examples: one passage per scene, completed with its right ending."""
    lines = ["Each passage below describes an everyday scene and ends with its most plausible continuation.\n"]
    for i in scene_indices:
        lines.append(f"Passage: {context_of(rng.choice(ACTORS), rng.choice(WHEN), i)} {SCENES[i][1]}\n")
    return "\n".join(lines) + "\n"


def make_program(shots: str, endings: list[str]) -> Any:
    """The program for one instance: `shots` and the candidate `endings` are constants.

    NOTE: select choices must be known at trace time, so every question of an instance is
    drawn from the same four scenes and shares their four ending sentences as candidates (the
    right one differs per question); the 20 shots come from other scenes.
    """
    choices = [" " + e for e in endings]

    @sgl.function
    def hellaswag_20shot(s, context):
        s += shots + "Passage: " + context
        s += sgl.select("ending", choices=choices)
    return hellaswag_20shot


def build(size: str, seed: int) -> WorkloadInstance:
    programs, num_shots = by_size(size, SIZE)
    rng = rng_for(NAME, seed, "scenes")
    order = rng.sample(range(len(SCENES)), len(SCENES))
    candidates, shot_scenes = order[:4], order[4:4 + num_shots]
    shots = shots_text(rng_for(NAME, seed, "shots"), shot_scenes)
    combos = [(a, w, c) for a in ACTORS for w in WHEN for c in candidates]
    picked = rng_for(NAME, seed, "inputs").sample(combos, programs + 1)
    items = [{"context": context_of(a, w, c)} for a, w, c in picked]
    program = make_program(shots, [SCENES[c][1] for c in candidates])
    return make_instance(program, size, items[-1], items[:-1])


WORKLOAD = Workload(
    name=NAME, title="HellaSwag 20-shot",
    shape="1 select over 4 sentence endings per program; 20 solved passages (tiny 5) shared by all questions",
    prefix_heavy=True, has_forks=False, has_constraints=False, build=build,
)
