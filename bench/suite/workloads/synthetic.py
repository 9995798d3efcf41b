"""Fixed-seed generators of readable English-like text for the workloads (no downloads).

Every generator takes a ``random.Random`` and draws only from it, so a workload built from
``rng_for(name, seed, part)`` is the same on every machine and Python run (string seeds are
hashed with SHA-512 by ``random.seed``, independent of PYTHONHASHSEED).
"""
from __future__ import annotations

import random
from typing import Any

FIRST_NAMES = [
    "Ana", "Ben", "Chloe", "Dev", "Elif", "Farah", "Goran", "Hana", "Ivo", "June", "Kofi", "Lena", "Mateo",
    "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Victor", "Wen", "Yara", "Zoe",
    "Marcus", "Ingrid", "Tomas", "Aiko", "Lucia",
]
LAST_NAMES = [
    "Alvarez", "Brennan", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kowalski",
    "Larsen", "Moreau", "Nakamura", "Okafor", "Petrov", "Quigley", "Rossi", "Schmidt", "Tanaka", "Usman",
    "Vargas", "Walsh", "Yilmaz", "Zhang", "Lindqvist", "Mensah", "Novak", "Ortega", "Patel",
]
CITIES = [
    "Lisbon", "Toronto", "Osaka", "Nairobi", "Melbourne", "Denver", "Lyon", "Krakow", "Porto", "Seattle",
    "Valencia", "Hamburg", "Austin", "Dublin", "Accra", "Bergen", "Quito", "Hanoi", "Tunis", "Glasgow",
    "Perth", "Turin", "Lagos", "Oslo", "Leeds", "Utrecht", "Geneva", "Boston", "Bilbao", "Graz",
]
OCCUPATIONS = [
    "civil engineer", "pastry chef", "high school teacher", "nurse", "software developer", "architect",
    "veterinarian", "librarian", "pilot", "electrician", "graphic designer", "pharmacist", "journalist",
    "carpenter", "marine biologist", "accountant", "photographer", "dentist", "farmer", "translator",
    "firefighter", "museum curator", "bus driver", "physiotherapist", "baker",
]
HOBBIES = [
    "painting", "rock climbing", "chess", "gardening", "cycling", "baking bread", "bird watching", "sailing",
    "playing the cello", "running marathons", "knitting", "photography", "hiking", "woodworking", "swimming",
    "writing poetry", "fishing", "pottery", "dancing", "astronomy",
]
ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "coins", "cards", "shells", "stamps", "cookies",
         "bottles", "tickets", "beads", "candles", "plants"]
PLACES = ["the park", "the library", "the market", "the harbor", "the old bridge", "the train station",
          "the museum", "the bakery", "the school yard", "the river bank", "the town square", "the bookshop"]
ACTIVITIES = ["reading a newspaper", "feeding the pigeons", "painting a mural", "repairing a bicycle",
              "selling fresh bread", "playing the guitar", "walking a small dog", "taking photographs",
              "sweeping the steps", "talking on the phone", "carrying a stack of boxes", "watering the flowers"]
WEATHER = ["a cold, clear morning", "a warm afternoon", "a rainy evening", "a windy day", "a foggy dawn",
           "a quiet Sunday", "a busy market day", "the first day of spring"]
TOPICS = [
    "improving sleep", "learning a new language", "saving money on groceries", "starting a vegetable garden",
    "preparing for a job interview", "reducing stress at work", "training for a first marathon",
    "keeping a small team motivated", "planning a family trip", "writing a clear report", "cooking for a crowd",
    "organizing a cluttered garage", "teaching a child to ride a bike", "choosing a used car",
    "running a good meeting", "making a home more energy efficient",
]
CHAT_OPENERS = [
    "I have a question about {topic}.", "Could you help me with {topic}?", "My friend asked me about {topic}.",
    "I am writing a short guide on {topic}.", "Lately I have been thinking about {topic}.",
]
CHAT_FOLLOWUPS = [
    "What is the most common mistake people make?", "How long does it usually take to see results?",
    "Can you give me one concrete example?", "What would you do first if you were me?",
    "Is there a cheap way to do it?", "How do I know if it is working?", "What should I avoid?",
    "Can you say that again in simpler words?", "Which tool or resource would you recommend?",
    "How would this change for a beginner?",
]
TOWN_FEATURES = ["apple orchards", "a glass factory", "a medieval castle", "a jazz festival", "salt marshes",
                 "a ferry port", "a rowing club", "cheese markets", "a botanical garden", "a stone observatory",
                 "paper mills", "a horse fair"]
TOWN_PREFIX = ["North", "Silver", "Elm", "Harbor", "Stone", "Maple", "River", "Cedar", "Bright", "Oak", "Fox",
               "Lark", "Amber", "Willow", "Iron", "Mill"]
TOWN_SUFFIX = ["field", "haven", "brook", "ford", "ridge", "port", "wick", "dale", "stead", "ton", "mouth", "bury"]
REGIONS = ["the northern hills", "the southern coast", "the eastern plains", "the river delta", "the western valley",
           "the lake district", "the high plateau", "the island chain"]


def rng_for(workload: str, seed: int, part: str = "") -> random.Random:
    """A Random for one part ("inputs", "warmup", "shots", ...) of one workload and seed."""
    return random.Random(f"{workload}/{seed}/{part}")


def person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def sentence(rng: random.Random) -> str:
    """One narrative sentence about someone somewhere doing something."""
    who = rng.choice(FIRST_NAMES)
    forms = [
        f"On {rng.choice(WEATHER)}, {who} was {rng.choice(ACTIVITIES)} near {rng.choice(PLACES)}.",
        f"{who} met {rng.choice(FIRST_NAMES)} at {rng.choice(PLACES)} and they talked about {rng.choice(TOPICS)}.",
        f"{who}, who works as a {rng.choice(OCCUPATIONS)}, spends most weekends {rng.choice(HOBBIES)}.",
        f"Near {rng.choice(PLACES)}, a {rng.choice(OCCUPATIONS)} was {rng.choice(ACTIVITIES)} while people passed by.",
        f"{who} bought {rng.randint(2, 12)} {rng.choice(ITEMS)} at {rng.choice(PLACES)} before going home.",
    ]
    return rng.choice(forms)


def paragraph(rng: random.Random, num_sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(num_sentences))


def word_problem(rng: random.Random) -> tuple[str, int]:
    """A GSM8K-like two-step word problem and its answer."""
    who, what = rng.choice(FIRST_NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(3, 40), rng.randint(2, 9), rng.randint(2, 12)
    d = rng.randint(1, a)
    text = (f"{who} has {a} {what}. {who} buys {b} packs with {c} {what} in each pack and then gives away {d} "
            f"{what} to a friend. How many {what} does {who} have now?")
    return text, a + b * c - d


def bio(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A short biography paragraph and the record it states (name, age, occupation, city, hobby)."""
    record = {"name": person(rng), "age": rng.randint(19, 78), "occupation": rng.choice(OCCUPATIONS),
              "city": rng.choice(CITIES), "hobby": rng.choice(HOBBIES)}
    first = record["name"].split()[0]
    forms = [
        f"{record['name']} is a {record['age']}-year-old {record['occupation']} who lives in {record['city']}. "
        f"In the evenings {first} enjoys {record['hobby']}.",
        f"Born and raised far from {record['city']}, {record['name']} moved there to work as a {record['occupation']}. "
        f"Now {record['age']}, {first} still finds time for {record['hobby']} every week.",
        f"At {record['age']}, {record['name']} has spent years as a {record['occupation']} in {record['city']}, "
        f"and friends know {first} for a love of {record['hobby']}.",
    ]
    return rng.choice(forms) + " " + sentence(rng), record


def town_document(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A short encyclopedia-style document about a generated town, and the facts it states."""
    facts = {"name": rng.choice(TOWN_PREFIX) + rng.choice(TOWN_SUFFIX), "region": rng.choice(REGIONS),
             "founded": rng.randint(1450, 1950), "population": rng.randint(2, 95) * 1000 + rng.randint(0, 9) * 100,
             "feature": rng.choice(TOWN_FEATURES), "mayor": person(rng), "river": rng.choice(TOWN_PREFIX) + " River"}
    text = (f"{facts['name']} is a town in {facts['region']}, founded in {facts['founded']} on the banks of the "
            f"{facts['river']}. It has a population of about {facts['population']} people and is best known for "
            f"{facts['feature']}. The current mayor is {facts['mayor']}. {sentence(rng)} {sentence(rng)}")
    return text, facts


def town_question(rng: random.Random, facts: dict[str, Any]) -> str:
    name = facts["name"]
    return rng.choice([
        f"When was {name} founded?", f"How many people live in {name}?", f"What is {name} best known for?",
        f"Who is the mayor of {name}?", f"Which river runs through {name}?", f"In which region is {name}?",
    ])


def chat_turns(rng: random.Random, num_turns: int, opener_sentences: int) -> list[str]:
    """User turns of one conversation: an opener with some context, then follow-up questions."""
    topic = rng.choice(TOPICS)
    first = rng.choice(CHAT_OPENERS).format(topic=topic) + " " + paragraph(rng, opener_sentences)
    first += f" What are the first steps for {topic}?"
    followups = rng.sample(CHAT_FOLLOWUPS, num_turns - 1)
    return [first] + followups
