"""Write lm_choice.jsonl: the multiple-choice items the causal-LM `choice` probe scores by log-likelihood.

Every fact, word list and template below was written for recall (recall's licence, Apache-2.0); nothing is
taken from a benchmark. Each item is {"prompt", "choices", "answer", "kind"}: the model reads the prompt and
each choice is scored by the summed log-probability of its tokens after it; the answer is the index of
the right choice. Choices are shuffled with a fixed seed, so the right one is not always first.

    python data/probe/make_choices.py          # rewrites data/probe/lm_choice.jsonl (deterministic)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("lm_choice.jsonl")
SEED = 0

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("China", "Beijing"), ("Russia", "Moscow"), ("the United Kingdom", "London"), ("Egypt", "Cairo"),
    ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Poland", "Warsaw"),
    ("Austria", "Vienna"), ("Hungary", "Budapest"), ("the Czech Republic", "Prague"), ("Belgium", "Brussels"),
    ("the Netherlands", "Amsterdam"), ("Canada", "Ottawa"), ("Argentina", "Buenos Aires"), ("Peru", "Lima"),
    ("Chile", "Santiago"), ("Kenya", "Nairobi"), ("Thailand", "Bangkok"), ("South Korea", "Seoul"),
    ("India", "New Delhi"), ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Cuba", "Havana"),
    ("Colombia", "Bogota"), ("Venezuela", "Caracas"), ("the Philippines", "Manila"), ("Indonesia", "Jakarta"),
    ("Vietnam", "Hanoi"), ("Australia", "Canberra"),
]

ANTONYMS = [
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"), ("happy", "sad"), ("dark", "light"),
    ("tall", "short"), ("open", "closed"), ("early", "late"), ("full", "empty"), ("rich", "poor"),
    ("strong", "weak"), ("wet", "dry"), ("hard", "soft"), ("loud", "quiet"), ("thick", "thin"),
    ("wide", "narrow"), ("first", "last"), ("win", "lose"), ("buy", "sell"), ("push", "pull"),
    ("inside", "outside"), ("day", "night"), ("north", "south"), ("east", "west"), ("left", "right"),
    ("black", "white"), ("true", "false"), ("love", "hate"), ("begin", "end"), ("above", "below"),
    ("asleep", "awake"), ("clean", "dirty"), ("cheap", "expensive"), ("deep", "shallow"), ("friend", "enemy"),
    ("give", "take"), ("remember", "forget"), ("always", "never"), ("more", "less"),
]

# (singular, the plural, two wrong plurals)
PLURALS = [
    ("mouse", "mice", "mouses", "mousen"), ("child", "children", "childs", "childes"),
    ("foot", "feet", "foots", "footen"), ("tooth", "teeth", "tooths", "toothes"), ("man", "men", "mans", "manes"),
    ("woman", "women", "womans", "womanes"), ("person", "people", "persones", "peoples"),
    ("goose", "geese", "gooses", "goosen"), ("ox", "oxen", "oxs", "oxes"), ("leaf", "leaves", "leafs", "leafes"),
    ("knife", "knives", "knifes", "knifs"), ("wife", "wives", "wifes", "wifs"), ("half", "halves", "halfs", "halfes"),
    ("wolf", "wolves", "wolfs", "wolfes"), ("life", "lives", "lifes", "lifs"), ("box", "boxes", "boxs", "boxen"),
    ("bus", "buses", "buss", "busen"), ("baby", "babies", "babys", "babyes"), ("city", "cities", "citys", "cityes"),
    ("story", "stories", "storys", "storyes"), ("glass", "glasses", "glasss", "glassen"),
    ("dish", "dishes", "dishs", "dishen"), ("potato", "potatoes", "potatos", "potatoen"),
    ("tomato", "tomatoes", "tomatos", "tomatoen"), ("hero", "heroes", "heros", "heroen"),
]

CATEGORIES = {
    "animal": ["dog", "cat", "horse", "cow", "lion", "tiger", "rabbit", "elephant"],
    "fruit": ["apple", "banana", "grape", "cherry", "pear", "peach", "strawberry"],
    "vegetable": ["carrot", "potato", "onion", "cabbage", "cucumber"],
    "vehicle": ["car", "bus", "truck", "bicycle", "motorcycle"],
    "tool": ["hammer", "saw", "wrench", "screwdriver", "drill"],
    "musical instrument": ["piano", "guitar", "violin", "drum", "flute"],
    "bird": ["sparrow", "eagle", "robin", "parrot", "owl"],
    "flower": ["rose", "tulip", "daisy", "lily"],
    "piece of furniture": ["chair", "table", "sofa", "bed", "wardrobe"],
}

SEQUENCES = {
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "month": ["January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December"],
    "number": ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
               "twelve", "thirteen", "fourteen", "fifteen"],
    "letter": list("ABCDEFGHIJKL"),
}

# (prompt, the right completion, three wrong ones): common knowledge in plain words
FACTS = [
    ("The sun rises in the", "east", "west", "north", "south"),
    ("When water freezes it turns into", "ice", "steam", "sand", "glass"),
    ("A week has seven", "days", "months", "years", "hours"),
    ("A year has twelve", "months", "weeks", "hours", "days"),
    ("Bees make", "honey", "milk", "silk", "wool"),
    ("Cows give us", "milk", "honey", "wool", "eggs"),
    ("Hens lay", "eggs", "milk", "honey", "stones"),
    ("People usually sleep in a", "bed", "sink", "oven", "bucket"),
    ("On a clear day the sky is", "blue", "green", "red", "brown"),
    ("Fresh grass is", "green", "blue", "purple", "white"),
    ("Fresh snow is", "white", "black", "red", "green"),
    ("Fish live in", "water", "trees", "sand", "fire"),
    ("Most birds can", "fly", "read", "drive", "cook"),
    ("We eat soup with a", "spoon", "knife", "comb", "pen"),
    ("We slice bread with a", "knife", "spoon", "towel", "brush"),
    ("A doctor works in a", "hospital", "bakery", "garage", "stadium"),
    ("Children learn to read at", "school", "sea", "night", "lunch"),
    ("The planet we live on is called", "Earth", "Mars", "Venus", "Jupiter"),
    ("The largest ocean on Earth is the", "Pacific", "Atlantic", "Indian", "Arctic"),
    ("There are sixty minutes in an", "hour", "day", "week", "year"),
    ("There are twenty-four hours in a", "day", "week", "month", "minute"),
    ("A baby cat is called a", "kitten", "puppy", "calf", "foal"),
    ("A baby dog is called a", "puppy", "kitten", "chick", "lamb"),
    ("A baby sheep is called a", "lamb", "puppy", "kitten", "calf"),
    ("We hear with our", "ears", "eyes", "hands", "feet"),
    ("We see with our", "eyes", "ears", "knees", "elbows"),
    ("We smell with our", "nose", "knee", "elbow", "hair"),
    ("The Earth goes around the", "Sun", "Moon", "clouds", "ocean"),
    ("Plants need sunlight and", "water", "plastic", "metal", "paper"),
    ("When you are tired you should", "sleep", "run", "shout", "swim"),
    ("A thermometer measures", "temperature", "weight", "money", "distance"),
    ("A clock tells the", "time", "weather", "news", "price"),
    ("Romeo and Juliet was written by William", "Shakespeare", "Dickens", "Wordsworth", "Blake"),
    ("The first person to walk on the Moon was Neil", "Armstrong", "Young", "Diamond", "Gaiman"),
    ("Water freezes at zero degrees", "Celsius", "Fahrenheit", "Kelvin", "north"),
    ("The highest mountain in the world is Mount", "Everest", "Kilimanjaro", "Fuji", "Etna"),
    ("A triangle has", "three sides", "four sides", "five sides", "six sides"),
    ("A spider has", "eight legs", "six legs", "four legs", "two legs"),
    ("Fire is", "hot", "cold", "wet", "frozen"),
    ("Lemons taste", "sour", "sweet", "salty", "bitter"),
    ("Sugar tastes", "sweet", "sour", "salty", "bitter"),
    ("Rain falls from the", "clouds", "ground", "trees", "rivers"),
    ("A library is full of", "books", "cars", "cows", "boats"),
    ("To open a locked door you need a", "key", "spoon", "cup", "shoe"),
    ("Ships sail on the", "sea", "road", "sky", "mountain"),
    ("Aeroplanes fly in the", "sky", "sea", "ground", "tunnel"),
    ("We wear shoes on our", "feet", "hands", "heads", "ears"),
    ("We wear gloves on our", "hands", "feet", "heads", "knees"),
    ("A bicycle has two", "wheels", "wings", "engines", "doors"),
]


def _item(prompt: str, right: str, wrong: list[str], kind: str, rng: random.Random) -> dict:
    choices = [" " + right] + [" " + w for w in wrong]
    order = list(range(len(choices)))
    rng.shuffle(order)
    return {"prompt": prompt, "choices": [choices[i] for i in order], "answer": order.index(0), "kind": kind}


def _others(pool: list[str], right: str, k: int, rng: random.Random, also_not: tuple[str, ...] = ()) -> list[str]:
    return rng.sample([w for w in dict.fromkeys(pool) if w != right and w not in also_not], k)


def items() -> list[dict]:
    rng = random.Random(SEED)
    out = []
    capitals = [c for _, c in CAPITALS]
    for country, capital in CAPITALS:
        out.append(_item(f"The capital of {country} is", capital, _others(capitals, capital, 3, rng), "capital", rng))
    opposites = [b for _, b in ANTONYMS]
    for word, opposite in ANTONYMS:
        out.append(_item(f"The opposite of {word} is", opposite, _others(opposites, opposite, 3, rng, (word,)),
                         "antonym", rng))
    for a in (2, 6):
        for b in range(1, 10):
            c = a + b
            out.append(_item(f"{a} + {b} =", str(c), [str(c - 1), str(c + 1), str(c + 2)], "arithmetic", rng))
    for singular, plural, *wrong in PLURALS:
        out.append(_item(f"One {singular}, two", plural, wrong, "plural", rng))
    kinds = list(CATEGORIES)
    for kind, members in CATEGORIES.items():
        for thing in members:
            article = "An" if thing[0] in "aeiou" else "A"
            out.append(_item(f"{article} {thing} is a kind of", kind, _others(kinds, kind, 3, rng), "category", rng))
    for name, words in SEQUENCES.items():
        for i in range(len(words) - 3):
            prompt = ", ".join(words[i : i + 3]) + ","
            out.append(_item(prompt, words[i + 3], _others(words, words[i + 3], 3, rng, tuple(words[i : i + 3])),
                             "sequence", rng))
    for prompt, right, *wrong in FACTS:
        out.append(_item(prompt, right, wrong, "fact", rng))
    return out


def main() -> None:
    lines = [json.dumps(item, ensure_ascii=False) for item in items()]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(lines)} items")


if __name__ == "__main__":
    main()
