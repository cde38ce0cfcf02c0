"""The deterministic hard-conflict checker of the screen (PatientAct §3.2: a rule-based checker flags
incompatibilities between the demographics and the formulation; MindEval2 App. C for the screen it is part of).

Two kinds of rule, both ours: a label whose `requires` (data/formulation.yaml) the demographics break, and a text
rule of data/screen_rules.yaml whose pattern is found in the profile of a patient its `when` matches. Each
conflict is a serious `Fault` quoting the profile, with the demographic fields it involves, so the screen can
send it to the writer and, under the PatientAct shape, `profilegen.demographics` can settle the ones it may.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, NamedTuple

from mindsimkit.profilegen.formulation import broken
from mindsimkit.profilegen.schemas import AnchoredRow, Fault, Formulation
from mindsimkit.profilegen.vocab import load_vocabularies, read_data


@lru_cache(maxsize=1)
def text_rules() -> list[tuple[str, re.Pattern[str], dict[str, Any], str]]:
    data = read_data("screen_rules.yaml")
    return [(r["id"], re.compile(r["pattern"], re.IGNORECASE), r["when"], r["reason"]) for r in data["text_rules"]]


def _matches(when: dict[str, Any], row: AnchoredRow) -> bool:
    d = row.demographics
    values = {
        "age_bands": d.age_band,
        "relationship": d.relationship,
        "employment": d.employment,
        "living_situation": d.living_situation,
        "gender": d.gender,
    }
    return all(values[k] in allowed for k, allowed in when.items())


class Conflict(NamedTuple):
    """A hard conflict, the demographic fields (`Demographics` names) it involves and, for a text rule on one
    field, the values of that field under which it fires."""

    fault: Fault
    fields: frozenset[str]
    excludes: dict[str, frozenset[str]] = {}


def picked_labels(f: Formulation) -> list[Any]:
    """The vocabulary entry of every label the formulation uses (their `requires` are the label constraints)."""
    voc = load_vocabularies()
    pre = [voc.predisposing.get(p.label) or voc.social_predisposing[p.label] for p in f.predisposing]
    return [*pre, voc.precipitating[f.precipitating.label], *(voc.protective[p.label] for p in f.protective)]


def hard_conflicts(row: AnchoredRow, f: Formulation, text: str) -> list[Conflict]:
    """Hard conflicts between demographics and the formulation, each quoting the profile text."""
    out = []
    for label in picked_labels(f):
        bad = broken(label, row.demographics)
        if bad:
            why = ", ".join(f"{k} is {v}" for k, v in bad.items())
            out.append(
                Conflict(
                    Fault(
                        quote=label.id.replace("_", " "),
                        source="rule",
                        severity="serious",
                        reason=f"label {label.id} does not fit this patient: {why}",
                    ),
                    frozenset(bad),
                )
            )
    for rule_id, pattern, when, reason in text_rules():
        if _matches(when, row):
            hit = pattern.search(text)
            if hit:
                named = {"age_band" if k == "age_bands" else k: frozenset(v) for k, v in when.items()}
                out.append(
                    Conflict(
                        Fault(
                            quote=hit.group(0), reason=f"{reason} (rule {rule_id})", severity="serious", source="rule"
                        ),
                        frozenset(named),
                        named if len(named) == 1 else {},
                    )
                )
    return out


def rule_faults(row: AnchoredRow, f: Formulation, text: str) -> list[Fault]:
    """Hard conflicts between demographics and the formulation, as faults."""
    return [c.fault for c in hard_conflicts(row, f, text)]
