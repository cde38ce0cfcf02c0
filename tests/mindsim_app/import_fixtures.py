"""Small files in the documented shapes of the MindEval authors' three releases, with invented content (no row of
the real files is copied): the importers' tests read these as a user's downloaded files.

Shapes (SWORDHealth/mind-eval): `data/profiles.jsonl` lines are `MemberRow`s (member_id, formulation, knobs,
archetype, situation); `data/member_realism_annotations.json` is {metadata, items} with windows, turns and
per-annotator ratings; MindEval v1's `data/human_annotations.jsonl` is a Label Studio export with parallel
`<criterion>.responses`, `.responses.users`, `.responses.status` lists."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

# -- data/profiles.jsonl ---------------------------------------------------------------------------------------

FORMULATION = (
    "Ines is 37, works as library technician, alone.\n\nHow life is going overall. moderate.\n\n"
    "What brings them here now. Ines reports two months of flat mood since the branch she ran was merged into the "
    "central library; she has stopped her Sunday swims and cancels on friends.\n"
    "What they want out of support: I want my Sundays back, and to stop rehearsing every shift in my head.\n\n"
    "Predisposing. The eldest of three, she learned that being reliable was how she earned a place.\n\n"
    "Precipitating. In March the branch closed and her post became a rota at the central desk.\n\n"
    "Perpetuating. She keeps busy and keeps quiet.\n- withdrawal: she has skipped four swims.\n\n"
    "Protective. Her neighbour Tomas still knocks on Fridays.\n\n"
)
# Over our writer's limits on purpose (event > 500 characters, five behaviours, four checkpoints, opening > 200),
# as the released situations are: a given situation is stored as it is.
LONG_EVENT = ("On Tuesday the rota for next month came out and her name was on the weekend desk again. " * 8).strip()
OPENING = (
    "hi. I'm not sure how to begin. The library I ran for six years was folded into the central one in the "
    "spring and I've been telling everyone it's fine, but honestly most days I come home and just sit in the "
    "car for a while before I go in."
)


def member(mid: str = "m9001", archetype: str = "externalizer", **over: Any) -> dict[str, Any]:
    row = {
        "member_id": mid,
        "formulation": FORMULATION.replace("Ines", f"Ines-{mid}"),
        "knobs": {
            "concealment_propensity": "high",
            "frustration_reactivity": "medium",
            "session_affect": "joy",
            "verbosity": "low",
            "writing_style": "casual",
        },
        "archetype": archetype,
        "situation": {
            "situation_id": f"{mid}_sit00",
            "event": LONG_EVENT,
            "automatic_thoughts": ["they didn't even ask me", "it's just a rota"],
            "behaviors": [
                "read the rota twice",
                "closed the laptop",
                "skipped the swim",
                "ate standing up",
                "left Tomas's knock unanswered",
            ],
            "physical": ["jaw tight all evening"],
            "opening_message": OPENING,
            "goal": "work out whether to ask for the weekday desk back",
            "checkpoints": ["the rota", "the branch closing", "Sundays", "Tomas"],
        },
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(row.get(key), dict):
            row[key] = {**row[key], **value}
        else:
            row[key] = value
    return row


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- data/member_realism_annotations.json -------------------------------------------------------------------------


def _rating(
    who: str,
    turn: int,
    rating: int,
    form: list[str] | None = None,
    content: list[str] | None = None,
    severity: str = "no_concern",
    issues: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "annotator": who,
        "turn": turn,
        "rating": rating,
        "form_issues": form or [],
        "content_issues": content or [],
        "counsellor_severity": severity,
        "counsellor_issues": issues or [],
    }


def _turns(conv: str, first: int, n: int) -> list[dict[str, Any]]:
    # The text depends on the place in the conversation only, so overlapping windows show the same messages.
    return [
        {
            "turn": t,
            "counsellor": f"[{conv}] counsellor message {first + t - 1}",
            "member": f"[{conv}] member reply {first + t - 1}",
        }
        for t in range(1, n + 1)
    ]


def _item(
    iid: str,
    conv: str,
    system: str,
    model: str,
    context: str,
    first: int,
    n: int,
    ratings: list[dict[str, Any]],
    all_raters: bool = False,
) -> dict[str, Any]:
    return {
        "item_id": iid,
        "conversation_id": conv,
        "system": system,
        "counsellor_model": model,
        "context": context,
        "source_window": {"first_member_turn": first, "n_turns": n},
        "rated_by_all_annotators": all_raters,
        "turns": _turns(conv, first, n),
        "ratings": ratings,
    }


def realism_release() -> dict[str, Any]:
    """Six windows of three systems from four conversations: one window rated by all three annotators, two
    overlapping windows of one conversation shown to different annotators (the release's own layout)."""
    items = [
        # Rated by A1, A2 and A3: the all-rater subset of Table 13.
        _item(
            "item_001",
            "conv_001",
            "ours",
            "model-x",
            "last5",
            2,
            2,
            [
                _rating("A1", 1, 4),
                _rating("A1", 2, 5),
                _rating("A2", 1, 4, severity="minor", issues=["over_exploring"]),
                _rating("A2", 2, 3, form=["register"]),
                _rating("A3", 1, 5),
                _rating("A3", 2, 4, content=["synergistic_sycophancy"]),
            ],
            all_raters=True,
        ),
        _item("item_002", "conv_002", "ours", "model-y", "single", 4, 1, [_rating("A2", 1, 5)]),
        _item(
            "item_003",
            "conv_003",
            "mindeval",
            "model-x",
            "last5",
            2,
            3,
            [
                _rating(
                    "A1",
                    1,
                    2,
                    content=["emotion_mismatch", "other"],
                    severity="major",
                    issues=["treating_perspective_as_fact", "under_guiding"],
                ),
                _rating("A1", 2, 3, form=["punctuation_typography"]),
                _rating("A1", 3, 2, form=["length_format"], content=["monologuing"]),
            ],
        ),
        # Overlaps item_003 at conversation positions 3 and 4, rated by another annotator.
        _item(
            "item_004",
            "conv_003",
            "mindeval",
            "model-x",
            "last5",
            3,
            2,
            [
                _rating("A3", 1, 3, severity="minor", issues=["gives_bad_advice"]),
                _rating("A3", 2, 1, content=["self_analysis"], severity="major", issues=["out_of_scope_responding"]),
            ],
        ),
        _item(
            "item_005",
            "conv_004",
            "patient.psi",
            "model-y",
            "last5",
            2,
            2,
            [
                _rating("A2", 1, 1, form=["register", "other"], content=["monologuing"]),
                _rating(
                    "A2",
                    2,
                    2,
                    form=["length_format"],
                    content=["monologuing"],
                    severity="minor",
                    issues=["excessive_verbosity"],
                ),
            ],
        ),
        _item("item_006", "conv_004", "patient.psi", "model-y", "single", 5, 1, [_rating("A1", 1, 2)]),
    ]
    return {
        "metadata": {"title": "invented test release", "counts": {"items": len(items), "turn_ratings": 15}},
        "items": items,
    }


def write_json(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1), encoding="utf-8")
    return path


def broken(release: dict[str, Any], change) -> dict[str, Any]:
    """A copy of `release` with `change(copy)` applied."""
    out = copy.deepcopy(release)
    change(out)
    return out


# -- MindEval v1 data/human_annotations.jsonl ------------------------------------------------------------------------

CRITERIA = [
    "criterion_1",
    "criterion_2",
    "criterion_3",
    "criterion_4",
    "criterion_6",
    "criterion_7",
    "criterion_8",
    "criterion_9",
    "criterion_10",
    "criterion11",
]
USERS = ["u-aaaa", "u-bbbb", "u-cccc"]


def v1_line(
    cid: str,
    values: dict[str, list[int]],
    model: str = "vendor/model-a",
    name: str = "Sam",
    status: list[str] | None = None,
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "id": cid,
        "status": "completed",
        "member_profile": "**Member Profile:** invented",
        "conversation": "**Turn 1** invented",
    }
    for crit in CRITERIA:
        vals = values.get(crit, [3, 4, 3])
        line[f"{crit}.responses"] = vals
        line[f"{crit}.responses.users"] = USERS[: len(vals)]
        line[f"{crit}.responses.status"] = status or ["submitted"] * len(vals)
    line.update(
        {
            "score_justification.responses": None,
            "model": model,
            "member_attributes": {"name": name},
            "messages": [{"role": "assistant", "content": "Hi."}],
        }
    )
    return line


def v1_release() -> list[dict[str, Any]]:
    return [
        v1_line("conv-a", {"criterion_1": [2, 2, 3], "criterion_4": [5, 0, 5]}),
        v1_line("conv-b", {"criterion_1": [5, 4, 5], "criterion_9": [1, 2, 0]}, model="vendor/model-b", name="Ana"),
        v1_line("conv-c", {"criterion_1": [3, 3, 4]}, status=["submitted", "submitted", "skipped"]),
    ]
