"""The MindEval2 authors' released realism study (SWORDHealth/mind-eval `data/member_realism_annotations.json`) in
the files `mindsim realism report` and `mindsim judge agreement` read (MindEval2 §4.3, App. E; §3.4).

The release is one JSON document: `metadata` (protocol, label definitions, counts) and `items`, each a window of
1, 5 or 9 turns cut from a generated conversation (`source_window.first_member_turn`: where it starts, counted in
member turns of that conversation). Every rating is one annotator on one turn: the member reply's realism rating
with its form and content issues, and the counsellor message's severity and issues.

Two outputs, both written only after every record has passed its checks:
- realism ratings, one line per rating in our export's shape (`item_id`, `unit` = `turn` = the turn in the window,
  `rater`, `rating`, `reasons`, `system`, `conversation_id`, `patient_id`, `window`, `counsellor`). The release
  names no patients, so `patient_id` is the conversation: the report's bootstrap then resamples conversations.
  An empty issue list is the group's `none`; comments were not released, so `other` carries no words.
- MHQR annotations of the counsellor messages (`excerpt_id` = item, `turn`, `annotator`, `severity`, `issues`)
  and the key `judge agreement --key` reads (item → its turns as replies, counsellor model, and for the record the
  conversation and where the window starts). Each window is its own excerpt, as the paper computes agreement per
  excerpt (§3.4: the excerpts every annotator rated): the same counsellor message shown in two windows of one
  conversation, with different context and to different annotators, is two rated replies, not one.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from mindsimkit.mindsim_app.imports.common import Record, json_file, names, unique


def _map_issues(rec: Record, field: str, mapping: dict[str, str]) -> list[str]:
    out = []
    for i, raw in enumerate(rec.get(field, list)):
        if raw not in mapping:
            raise rec.fail(f"{field}[{i}]", f"unknown label {raw!r}; the release's labels are {', '.join(mapping)}")
        out.append(mapping[raw])
    if len(set(out)) != len(out):
        raise rec.fail(field, "a label is given twice")
    return out


def _turns(item: Record) -> dict[int, dict[str, str]]:
    turns: dict[int, dict[str, str]] = {}
    for k, raw in enumerate(item.get("turns", list)):
        t = Record(raw, f"{item.where}.turns[{k}]", "one turn")
        n = t.get("turn", int)
        if n != k + 1:
            raise t.fail("turn", f"turns are numbered from 1 in order; expected {k + 1}, got {n}")
        turns[n] = {"counsellor": t.text("counsellor"), "member": t.text("member")}
    if not turns:
        raise item.fail("turns", "empty; every window holds at least one turn")
    return turns


def _item(raw: Any, where: str, maps: dict[str, Any]) -> dict[str, Any]:
    item = Record(raw, where, "one rated window")
    out: dict[str, Any] = {
        "item_id": item.text("item_id"),
        "conversation_id": item.text("conversation_id"),
        "system": item.one_of("system", maps["systems"]),
        "counsellor": item.text("counsellor_model"),
        "context": item.one_of("context", {c: c for c in maps["contexts"]}),
        "all_raters": item.get("rated_by_all_annotators", bool),
    }
    window = item.child("source_window", "the window's place in its conversation")
    first = window.get("first_member_turn", int)
    if first < 2:
        raise window.fail("first_member_turn", f"{first}: windows start after the member's opening turn (2 or more)")
    out["turns"] = _turns(item)
    out["first_member_turn"] = first
    if window.get("n_turns", int) != len(out["turns"]):
        raise window.fail("n_turns", f"{window.obj['n_turns']}, but the item has {len(out['turns'])} turns")
    ratings, seen = [], set()
    for k, raw_rating in enumerate(item.get("ratings", list)):
        r = Record(raw_rating, f"{where}.ratings[{k}]", "one annotator's rating of one turn")
        who, turn = r.text("annotator"), r.get("turn", int)
        if turn not in out["turns"]:
            raise r.fail("turn", f"{turn}: the item has turns 1-{len(out['turns'])}")
        if (who, turn) in seen:
            raise r.fail("turn", f"annotator {who!r} rates turn {turn} twice")
        seen.add((who, turn))
        rating = r.get("rating", int)
        if rating not in maps["ratings"]:
            raise r.fail("rating", f"{rating} is not on the 1-5 scale")
        reasons = []
        for group in ("form", "content"):
            got = _map_issues(r, f"{group}_issues", maps[f"{group}_issues"])
            reasons += got or [f"{group}_none"]
        ratings.append(
            {
                "rater": who,
                "turn": turn,
                "rating": rating,
                "reasons": reasons,
                "severity": r.one_of("counsellor_severity", maps["counsellor_severity"]),
                "issues": _map_issues(r, "counsellor_issues", maps["counsellor_issues"]),
            }
        )
    if not ratings:
        raise item.fail("ratings", "empty; a released window has at least one rating")
    by_rater: dict[str, set[int]] = defaultdict(set)
    for r_ in ratings:
        by_rater[r_["rater"]].add(r_["turn"])
    for who, rated in by_rater.items():
        if rated != set(out["turns"]):
            missing = sorted(set(out["turns"]) - rated)
            raise item.fail(
                "ratings",
                f"annotator {who!r} rates turns {sorted(rated)} but not {missing}; a window is rated on every turn",
            )
    out["ratings"] = ratings
    return out


def read_release(path: Path) -> dict[str, Any]:
    """The release's items, checked and with our names, and its documented counts."""
    doc = json_file(Path(path))
    top = Record(doc, str(path), "the whole release: an object with 'metadata' and 'items'")
    maps = names()["realism"]
    items = [_item(raw, f"{path}: items[{i}]", maps) for i, raw in enumerate(top.get("items", list))]
    if not items:
        raise top.fail("items", "empty; the release holds 119 rated windows")
    unique([(it["item_id"], f"{path}: items[{i}]") for i, it in enumerate(items)], "item_id")
    meta = top.get("metadata", dict, optional=True) or {}
    return {"items": items, "counts": meta.get("counts") if isinstance(meta.get("counts"), dict) else None}


def realism_lines(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per rating, as `mindsim annotate export` writes realism ratings with the key."""
    return [
        {
            "item_id": it["item_id"],
            "unit": r["turn"],
            "turn": r["turn"],
            "rater": r["rater"],
            "rating": r["rating"],
            "reasons": r["reasons"],
            "other": {},
            "system": it["system"],
            "conversation_id": it["conversation_id"],
            "patient_id": it["conversation_id"],
            "window": len(it["turns"]),
            "counsellor": it["counsellor"],
            "real": False,
        }
        for it in items
        for r in it["ratings"]
    ]


def mhqr_lines(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The counsellor labels as `judge agreement` annotation lines, and the key that places them."""
    lines = [
        {
            "excerpt_id": it["item_id"],
            "turn": r["turn"],
            "annotator": r["rater"],
            "severity": r["severity"],
            "issues": r["issues"],
        }
        for it in items
        for r in it["ratings"]
    ]
    key = {
        "excerpts": {
            it["item_id"]: {
                "session_id": it["item_id"],
                "counsellor": it["counsellor"],
                "reply_indices": [t - 1 for t in sorted(it["turns"])],
                "conversation_id": it["conversation_id"],
                "first_member_turn": it["first_member_turn"],
                "system": it["system"],
                "context": it["context"],
            }
            for it in items
        }
    }
    return lines, key


def summary(release: dict[str, Any]) -> dict[str, Any]:
    """What was read, beside the counts the release's metadata states (so a reader sees they match)."""
    items = release["items"]
    by_system: dict[str, dict[str, int]] = defaultdict(lambda: {"items": 0, "ratings": 0})
    for it in items:
        by_system[it["system"]]["items"] += 1
        by_system[it["system"]]["ratings"] += len(it["ratings"])
    return {
        "items": len(items),
        "conversations": len({it["conversation_id"] for it in items}),
        "turn_ratings": sum(len(it["ratings"]) for it in items),
        "by_system": dict(sorted(by_system.items())),
        "items_rated_by_all_annotators": sum(it["all_raters"] for it in items),
        "annotators": sorted({r["rater"] for it in items for r in it["ratings"]}),
        "release_counts": release["counts"],
    }
