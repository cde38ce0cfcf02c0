"""A small SYNTHETIC persona sample in the Nemotron-Personas-USA schema (NOTES §3, all 23 columns), made
by this toolkit so offline runs and tests work without the Hub (MindEval2 §4.1 reads Nemotron, which no
machine here can download). It is NOT Nemotron data: names, places and texts are assembled from the
small lists below; demographic shares are rough US-adult figures (ACS-style), rounded, and about 3% of
rows are 16–17 so the under-18 rule is exercised. Every uuid starts with `synthetic-`.

Regenerate the shipped file: `python -m profilegen.synthetic_personas --n 300 --seed 0`.
"""

from __future__ import annotations

import argparse
import json
import uuid as uuidlib
from pathlib import Path
from typing import Any

import numpy as np

NAMES = {
    "Female": [
        "Maria",
        "Linda",
        "Aisha",
        "Jennifer",
        "Mei",
        "Rosa",
        "Tanya",
        "Grace",
        "Emily",
        "Keisha",
        "Priya",
        "Hannah",
        "Carmen",
        "Sofia",
        "Denise",
        "Olivia",
        "Nadia",
        "Brenda",
    ],
    "Male": [
        "James",
        "Carlos",
        "Michael",
        "Wei",
        "Darnell",
        "Robert",
        "Luis",
        "Ahmed",
        "Kevin",
        "Tyler",
        "Joseph",
        "Raj",
        "Brandon",
        "Marcus",
        "Daniel",
        "Hector",
        "Samuel",
        "Trevor",
    ],
}
SURNAMES = [
    "Garcia",
    "Johnson",
    "Nguyen",
    "Smith",
    "Patel",
    "Williams",
    "Brown",
    "Lopez",
    "Kim",
    "Davis",
    "Martinez",
    "Okafor",
    "Miller",
    "Chen",
    "Wilson",
    "Hernandez",
    "Jackson",
    "Rivera",
]
PLACES = [
    ("Columbus", "OH", "43215"),
    ("Tucson", "AZ", "85701"),
    ("Fresno", "CA", "93721"),
    ("Atlanta", "GA", "30303"),
    ("Spokane", "WA", "99201"),
    ("El Paso", "TX", "79901"),
    ("Dayton", "OH", "45402"),
    ("Albany", "NY", "12207"),
    ("Mobile", "AL", "36602"),
    ("Madison", "WI", "53703"),
    ("Raleigh", "NC", "27601"),
    ("Des Moines", "IA", "50309"),
    ("Newark", "NJ", "07102"),
    ("Boise", "ID", "83702"),
    ("Tulsa", "OK", "74103"),
]
OCCUPATIONS = [
    "registered_nurse",
    "retail_salesperson",
    "cashier",
    "software_developer",
    "truck_driver",
    "elementary_school_teacher",
    "construction_laborer",
    "customer_service_representative",
    "accountant",
    "cook",
    "janitor",
    "office_clerk",
    "electrician",
    "home_health_aide",
    "police_officer",
    "hairdresser",
    "warehouse_worker",
    "marketing_manager",
    "mechanic",
    "waiter",
    "pharmacist",
    "social_worker",
    "bus_driver",
    "receptionist",
    "farmworker",
    "graduate_student",
    "unemployed",
]
EDUCATION = [
    "less_than_9th",
    "9th_12th_no_diploma",
    "high_school",
    "some_college",
    "associates",
    "bachelors",
    "graduate",
]
EDUCATION_P = [0.04, 0.06, 0.27, 0.20, 0.09, 0.22, 0.12]
FIELDS = ["business", "education", "engineering", "arts_humanities", "health", "stem", "social_sciences"]
HOBBIES = [
    "gardening",
    "fishing",
    "baking",
    "hiking",
    "video games",
    "church choir",
    "woodworking",
    "knitting",
    "basketball",
    "reading mysteries",
    "photography",
    "cooking for friends",
    "watching football",
    "volunteering at the food bank",
    "running",
    "salsa dancing",
]
SKILLS = [
    "budgeting",
    "fixing cars",
    "organizing events",
    "customer care",
    "spreadsheets",
    "carpentry",
    "first aid",
    "teaching children",
    "public speaking",
    "bilingual Spanish",
    "cooking",
    "sewing",
]
BACKGROUNDS = [
    "Mexican American family in the Southwest",
    "Black family with roots in the rural South",
    "Irish and German Catholic Midwestern family",
    "Vietnamese refugee family",
    "Puerto Rican family in the Northeast",
    "Punjabi Sikh immigrant family",
    "white working-class Appalachian family",
    "Korean American family",
    "Nigerian immigrant family",
    "Polish American family in the Rust Belt",
]
SPORTS = [
    "follows the local baseball team",
    "plays pickup basketball",
    "walks every morning",
    "coaches youth soccer",
    "rarely watches sports",
]
ARTS = [
    "sings along to old soul records",
    "paints watercolours",
    "reads poetry at the library",
    "rarely visits museums",
    "loves mariachi",
]
TRAVEL = [
    "road trips to national parks",
    "visiting family back home",
    "rarely travels",
    "cheap weekend trips",
    "dreams of seeing Japan",
]
CULINARY = [
    "cooks big Sunday dinners",
    "lives on takeout",
    "bakes bread",
    "grills in the summer",
    "keeps family recipes",
]
GOALS = [
    "wants to get a promotion",
    "hopes to open a small business",
    "wants to retire comfortably",
    "wants to finish a degree",
    "hopes to buy a house",
    "wants steadier hours",
]
AGE_GROUPS = [
    ((16, 17), 0.03),
    ((18, 24), 0.12),
    ((25, 34), 0.17),
    ((35, 44), 0.16),
    ((45, 54), 0.15),
    ((55, 64), 0.16),
    ((65, 90), 0.21),
]


def _marital(rng: np.random.Generator, age: int) -> str:
    if age < 25:
        p = [0.88, 0.10, 0.01, 0.0, 0.01]
    elif age < 45:
        p = [0.40, 0.48, 0.03, 0.01, 0.08]
    elif age < 65:
        p = [0.17, 0.58, 0.03, 0.05, 0.17]
    else:
        p = [0.07, 0.53, 0.01, 0.24, 0.15]
    codes = ["never_married", "married_present", "separated", "widowed", "divorced"]
    return codes[int(rng.choice(5, p=p))]


def _occupation(rng: np.random.Generator, age: int) -> str:
    p_out = 0.80 if age >= 65 else 0.40 if age < 25 else 0.30
    if age < 18 or rng.random() < p_out:
        return "not_in_workforce"
    return str(rng.choice(OCCUPATIONS))


def persona_record(rng: np.random.Generator) -> dict[str, Any]:
    sex = "Female" if rng.random() < 0.51 else "Male"
    lo, hi = AGE_GROUPS[int(rng.choice(len(AGE_GROUPS), p=[share for _, share in AGE_GROUPS]))][0]
    age = int(rng.integers(lo, hi + 1))
    name = f"{rng.choice(NAMES[sex])} {rng.choice(SURNAMES)}"
    city, state, zipcode = PLACES[int(rng.integers(len(PLACES)))]
    education = "high_school" if age < 18 else str(rng.choice(EDUCATION, p=EDUCATION_P))
    occupation = _occupation(rng, age)
    job = f"works as a {occupation.replace('_', ' ')}" if occupation != "not_in_workforce" else "is not working for pay"
    hobbies = [str(h) for h in rng.choice(HOBBIES, size=3, replace=False)]
    skills = [str(s) for s in rng.choice(SKILLS, size=3, replace=False)]
    background = str(rng.choice(BACKGROUNDS))
    goal = str(rng.choice(GOALS))
    return {
        "uuid": f"synthetic-{uuidlib.UUID(bytes=rng.bytes(16), version=4)}",
        "professional_persona": f"{name} {job}, known for {skills[0]} and a steady work ethic.",
        "sports_persona": f"{name} {rng.choice(SPORTS)}.",
        "arts_persona": f"{name} {rng.choice(ARTS)}.",
        "travel_persona": f"{name} prefers {rng.choice(TRAVEL)}.",
        "culinary_persona": f"{name} {rng.choice(CULINARY)}.",
        "persona": f"{name}, {age}, from {city}, {state}, {job} and is into {hobbies[0]} and {hobbies[1]}.",
        "cultural_background": f"Raised in a {background}.",
        "skills_and_expertise": f"{name} is good at {', '.join(skills)}.",
        "skills_and_expertise_list": repr(skills),
        "hobbies_and_interests": f"{name} enjoys {', '.join(hobbies)}.",
        "hobbies_and_interests_list": repr(hobbies),
        "career_goals_and_ambitions": f"{name} {goal}.",
        "sex": sex,
        "age": age,
        "marital_status": _marital(rng, age),
        "education_level": education,
        "bachelors_field": str(rng.choice(FIELDS)) if education in ("bachelors", "graduate") else "",
        "occupation": occupation,
        "city": city,
        "state": state,
        "zipcode": zipcode,
        "country": "USA",
    }


def generate(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [persona_record(rng) for _ in range(n)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "data" / "synthetic_personas.jsonl")
    args = ap.parse_args(argv)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in generate(args.n, args.seed))
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.n} synthetic personas to {args.out}")


if __name__ == "__main__":
    main()
