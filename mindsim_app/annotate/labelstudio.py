"""Label Studio interchange for teams that already run it: a task folder out as Label Studio tasks with a
labeling config per protocol, and Label Studio's JSON export back in as the same answers the annotation page
stores (then written by `annotate export` into the same files).

Out (`mindsim annotate labelstudio export TASK --out DIR`): `tasks.json` (one Label Studio task per rated
unit, blinded like the page: the shown messages, the reply to rate, our item id and unit; never the system
code) and `config.xml` (the protocol's questions as Label Studio tags: Choices, Rating, TextArea). The profile
protocol's once-per-rater diversity question is a project of its own (`diversity/tasks.json` and
`diversity/config.xml`), since a Label Studio project shows one config to every task. Label Studio does not
know our assignment design; each task lists its `assigned` raters for the project manager to follow.

In (`… labelstudio import TASK EXPORT.json --out DIR`): every non-cancelled annotation becomes one answer;
the rater is the annotator's e-mail (its part before '@'), or `completed_by` as written, so name Label
Studio users after the raters. Answers are checked against the protocol as the server checks them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable
from xml.sax.saxutils import quoteattr

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.inputs import loads_json, read_input_text
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_text
from mindsimkit.judge.ratings import Ratings, cell_value, counted_out
from mindsimkit.judge.rubrics import Rubric
from mindsimkit.mindsim_app.annotate.protocol import DIVERSITY, for_task, protocol, realism_reasons, rubric_of
from mindsimkit.mindsim_app.annotate.tasks import load_task


def _choices(name: str, to: str, options: list[tuple[str, str]], multiple: bool, required: bool = True) -> str:
    kind = "multiple" if multiple else "single-radio"
    req = ' required="true"' if required else ""
    body = "".join(f"    <Choice value={quoteattr(v)} hint={quoteattr(h)}/>\n" for v, h in options)
    return f'  <Choices name={quoteattr(name)} toName={quoteattr(to)} choice="{kind}"{req}>\n{body}  </Choices>\n'


def _header(text: str, small: bool = False) -> str:
    # Literal text goes in Header (a Text tag's value names a data field).
    size = ' size="6"' if small else ""
    return f"  <Header value={quoteattr(text)}{size}/>\n"


def _textarea(name: str, to: str, max_chars: int) -> str:
    # Label Studio's TextArea has no length limit; the import checks it (`max_chars`) as the server does.
    del max_chars
    return f'  <TextArea name={quoteattr(name)} toName={quoteattr(to)} maxSubmissions="1" rows="2" editable="true"/>\n'


def _rating(name: str, to: str, top: int = 5) -> str:
    return f'  <Rating name={quoteattr(name)} toName={quoteattr(to)} maxRating="{top}" required="true"/>\n'


def _stars(points: list[Any]) -> bool:
    """Label Studio's Rating control gives 1..N stars: it fits an integer scale from 1 to at most 10 points;
    any other scale (labels, a 0 or a negative point, long ranges) is asked with Choices."""
    return (
        all(isinstance(p, int) for p in points)
        and points[0] == 1
        and points == list(range(1, len(points) + 1))
        and len(points) <= 10
    )


def config(protocol_name: str, task: Any = None) -> str:
    """The labeling config of one protocol (Label Studio XML), from its form (the rubric's, or realism's)."""
    p = for_task(task, protocol_name) if task is not None else protocol(protocol_name)
    f = p.form
    parts = ["<View>\n"]
    if f["form"] == "closing":
        parts += [
            _header(f["question"]),
            '  <Text name="note" value="$note"/>\n',
            _header(" · ".join(f"{k} {v}" for k, v in f["scale"].items())),
            _rating("rating", "note", max(f["scale"])),
            _textarea("comment", "note", 2000),
        ]
        return "".join(parts) + "</View>\n"
    parts.append(_header(f["title"]))
    if f.get("instructions"):
        parts.append(_header(f["instructions"], small=True))
    if f["form"] == "mhqr":
        parts += [_header("The counsellor's instructions"), '  <Text name="system_prompt" value="$system_prompt"/>\n']
    profile = f.get("unit") == "profile"
    if profile:
        parts += ['  <Paragraphs name="profile" value="$profile" nameKey="author" textKey="text"/>\n']
        to = "profile"
    else:
        parts += [
            '  <Paragraphs name="dialogue" value="$messages" layout="dialogue" nameKey="author" textKey="text"/>\n'
        ]
        to = "dialogue"
    if f["form"] in ("mhqr", "realism"):
        parts += [_header("Rate this reply"), '  <Text name="rated" value="$rated"/>\n']
        to = "rated"
    if f["form"] == "mhqr":
        parts.append(_choices("severity", to, [(s["id"], s["name"]) for s in f["severities"]], False))
        parts.append(
            _choices(
                "issues",
                to,
                [(i["id"], f"{c['name']}: {i['name']}") for c in f["categories"] for i in c["issues"]],
                True,
                required=False,
            )
        )
        parts += [_header("Quote (optional)"), _textarea("quote", to, f["quote_max_chars"])]
    elif f["form"] == "realism":
        for g in f["groups"]:
            opts = [(r["id"], r["name"]) for r in g["reasons"]] + [
                (f"{g['id']}_other", "Other"),
                (f"{g['id']}_none", "None"),
            ]
            parts += [
                _header(f"1. {g['name']} reasons"),
                _choices(g["id"], to, opts, True),
                _textarea(f"{g['id']}_other_text", to, f["other_max_chars"]),
            ]
        parts += [
            _header("2. " + f["question"] + " (" + ", ".join(f"{k} {v}" for k, v in f["scale"].items()) + ")"),
            _rating("rating", to),
        ]
    else:
        stars = _stars(f["points"])
        for d in f["dimensions"]:
            anchors = "; ".join(f"{k}: {v}" for k, v in d["levels"])
            parts += [_header(f"{d['name']}: {d['question']}"), _header(anchors, small=True)]
            parts.append(
                _rating(d["id"], to, len(f["points"]))
                if stars
                else _choices(d["id"], to, [(str(k), v) for k, v in d["levels"]], False)
            )
        for pick in f["picks"]:
            parts += [
                _header(f"{pick['name']} that fits best"),
                _choices(pick["id"], to, [(o["id"], o["text"]) for o in pick["options"]], False),
            ]
    parts += [_header("Comment (optional)"), _textarea("comment", to, f["comment_max_chars"]), "</View>\n"]
    return "".join(parts)


def _author(speaker: str) -> str:
    return "Patient" if speaker == "patient" else "Counsellor"


def export_labelstudio(task_dir: Path, out: Path) -> dict[str, Any]:
    task = load_task(task_dir)
    assigned: dict[str, list[str]] = {}
    for r, ids in task.assignments.items():
        for i in ids:
            assigned.setdefault(i, []).append(r)
    tasks, n = [], 0
    for iid, it in task.items.items():
        if it["protocol"] == DIVERSITY:
            continue
        d = it["display"]
        for u in it["units"]:
            data: dict[str, Any] = {"item_id": iid, "unit": u["unit"], "assigned": ", ".join(assigned.get(iid, []))}
            msgs = d.get("messages", [])
            if "system_prompt" in d:  # a counsellor turn shown with what came before it, as the page does
                msgs = msgs[: u["message"] + 1]
                data["system_prompt"] = d["system_prompt"]
            if "sections" in d:
                data["profile"] = [{"author": s["title"], "text": "\n".join(s["lines"])} for s in d["sections"]]
            else:
                data["messages"] = [
                    {
                        "author": _author(m["speaker"]) + (" ◀ rate this" if i == u.get("message") else ""),
                        "text": m["text"],
                    }
                    for i, m in enumerate(msgs)
                ]
            if "message" in u:
                data["rated"] = msgs[u["message"]]["text"]
            tasks.append({"data": data})
            n += 1
    out = Path(out)
    atomic_write_json(out / "tasks.json", tasks)
    atomic_write_text(out / "config.xml", config(task.protocol, task))
    result = {"tasks": n, "tasks_file": str(out / "tasks.json"), "config_file": str(out / "config.xml")}
    if DIVERSITY in task.items:
        div = [
            {
                "data": {
                    "item_id": DIVERSITY,
                    "unit": "0",
                    "assigned": r,
                    "note": f"For {r}: answer once, after rating all your profiles.",
                }
            }
            for r in task.assignments
        ]
        atomic_write_json(out / "diversity" / "tasks.json", div)
        atomic_write_text(out / "diversity" / "config.xml", config(DIVERSITY, task))
        result["diversity_tasks_file"] = str(out / "diversity" / "tasks.json")
    return result


def _rater(completed_by: Any, where: str) -> str:
    if isinstance(completed_by, dict):
        completed_by = completed_by.get("email") or completed_by.get("username") or completed_by.get("id")
    if completed_by is None or completed_by == "":
        raise InputError(f"{where}: annotation without completed_by; export from Label Studio with annotator details")
    text = str(completed_by)
    return text.split("@", 1)[0] if "@" in text else text


def _results(results: list[dict[str, Any]], where: str) -> dict[str, dict[str, Any]]:
    """Each control's value by control name. A result without its control or its value, or a control answered
    twice, is refused: reading past it would count a rating as missing, or keep one of two answers."""
    by: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(results):
        if r.get("type") == "relation":  # links two regions: no control, no value
            continue
        name, value = r.get("from_name"), r.get("value")
        if not isinstance(name, str) or not isinstance(value, dict) or not value:
            raise InputError(
                f"{where}: result {i} has no {'from_name' if not isinstance(name, str) else 'value'}; "
                "export the project as Label Studio 'JSON' (each result names its control and holds "
                "its value)"
            )
        # (A per-region control repeats its name once per region; only a whole-item answer given twice is ambiguous.)
        if name in by and {"choices", "rating"} & set(value) & set(by[name]):
            raise InputError(f"{where}: control {name!r} is answered twice in one annotation; keep one result")
        choices = value.get("choices")
        if choices is not None and (not isinstance(choices, list) or not all(isinstance(c, str) for c in choices)):
            raise InputError(
                f"{where}: control {name!r}: 'choices' is a {type(choices).__name__}, not a list of "
                "the chosen labels; export the project as Label Studio 'JSON'"
            )
        by[name] = value
    return by


def _one_choice(by: dict[str, dict[str, Any]], name: str, where: str) -> str | None:
    """The one label picked on a single-choice control (None when none was)."""
    picked = (by.get(name) or {}).get("choices") or []
    if len(picked) > 1:
        raise InputError(
            f"{where}: control {name!r} takes one choice and holds {len(picked)} "
            f'({", ".join(map(repr, picked[:4]))}); set the control to choice="single" and '
            "re-annotate, or keep one"
        )
    return picked[0] if picked else None


def _answer(form: dict[str, Any], results: list[dict[str, Any]], where: str, rubric: Any = None) -> dict[str, Any]:
    """Label Studio results as the answer the page would have sent for `form` (then checked like it)."""
    by = _results(results, where)

    def choices(name: str) -> list[str]:
        return list((by.get(name) or {}).get("choices") or [])

    def text(name: str) -> str | None:
        t = (by.get(name) or {}).get("text")
        t = "\n".join(t) if isinstance(t, list) else t
        return t.strip() if isinstance(t, str) and t.strip() else None

    def rating(name: str) -> Any:
        return (by.get(name) or {}).get("rating")

    out: dict[str, Any] = {}
    kind = form["form"]
    if kind == "mhqr":
        out = {"severity": _one_choice(by, "severity", where), "issues": choices("issues"), "quote": text("quote")}
    elif kind == "realism":
        groups = realism_reasons()
        other = {g: text(f"{g}_other_text") for g in groups if text(f"{g}_other_text")}
        out = {"reasons": [c for g in groups for c in choices(g)], "other": other or None, "rating": rating("rating")}
    elif kind == "closing":
        out = {"rating": rating("rating")}
    else:
        out = {
            "scores": {
                d: v
                for d, v in ((d["id"], _scale_value(form, d["id"], by, where, rubric)) for d in form["dimensions"])
                if v is not None
            }
        }
        for pick in form["picks"]:
            out[pick["id"]] = _one_choice(by, pick["id"], where)
    out["comment"] = text("comment")
    return {k: v for k, v in out.items() if v is not None}


def _scale_value(form: dict[str, Any], name: str, by: dict[str, dict[str, Any]], where: str, rubric: Any) -> Any:
    """An item's value: the stars of a Rating control, or the chosen point of a Choices control (text in Label
    Studio, read with the long format's rule for untyped cells)."""
    v = by.get(name) or {}
    if "rating" in v:
        return v["rating"]
    picked = _one_choice(by, name, where)
    if picked is None:
        return None
    return cell_value(picked, rubric) if rubric is not None else picked


def _load_export(export: Path) -> list[Any]:
    text = read_input_text(export, "Label Studio export")
    try:
        data = loads_json(text, str(export))
    except ValueError as exc:
        raise InputError(f"{export}: not a Label Studio JSON export ({exc})") from exc
    if not isinstance(data, list):
        raise InputError(f"{export}: expected a JSON list of tasks (Label Studio's 'JSON' export)")
    return data


def _data(t: Any, where: str) -> dict[str, Any]:
    """An exported task's `data`, after checking the task has the shape Label Studio exports."""
    if not isinstance(t, dict):
        raise InputError(
            f"{where}: a {type(t).__name__}, not a task object; export the project as Label Studio "
            "'JSON' (a list of task objects with data and annotations)"
        )
    d = t.get("data")
    if d is not None and not isinstance(d, dict):
        raise InputError(
            f"{where}: 'data' is a {type(d).__name__}, not an object of the task's fields; export the "
            "project as Label Studio 'JSON'"
        )
    return d or {}


def _annotations(
    t: Any, where: str, seen: dict[tuple[str, str, str], str], item: str, unit: str
) -> Iterable[tuple[str, dict[str, Any]]]:
    """(rater, annotation) of one exported task; cancelled ones skipped, a rater twice on one unit refused."""
    if "annotations" not in t:
        raise InputError(
            f"{where}: no 'annotations' field, so not a task of Label Studio's 'JSON' export (JSON-MIN "
            "and CSV exports leave out who rated); export the project as 'JSON'"
        )
    found = t.get("annotations") or []
    if not isinstance(found, list) or not all(isinstance(a, dict) for a in found):
        raise InputError(
            f"{where}: 'annotations' is not a list of annotation objects; export the project as Label Studio 'JSON'"
        )
    for a in found:
        if not isinstance(a.get("result") or [], list) or not all(isinstance(r, dict) for r in a.get("result") or []):
            raise InputError(
                f"{where}: an annotation's 'result' is not a list of result objects; export the project "
                "as Label Studio 'JSON'"
            )
        if a.get("was_cancelled"):
            continue
        rater = _rater(a.get("completed_by"), where)
        if not a.get("result"):
            raise InputError(
                f"{where}: the annotation by {rater} holds no result (nothing answered, yet not "
                "skipped); answer it in Label Studio, or delete that annotation before exporting"
            )
        k = (rater, item, unit)
        if k in seen:
            raise InputError(f"{where}: {rater} annotated item {item} unit {unit} twice (also {seen[k]}); keep one")
        seen[k] = where
        yield rater, a


def import_labelstudio(task_dir: Path, export: Path) -> list[dict[str, Any]]:
    """Answers (rater, item_id, unit, answer) from Label Studio's JSON export of this task's projects."""
    task = load_task(task_dir)
    answers: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str], str] = {}
    for n, t in enumerate(_load_export(export)):
        where = f"{export} task {n}"
        d = _data(t, where)
        iid, unit = d.get("item_id"), str(d.get("unit", ""))
        it = task.items.get(iid) if isinstance(iid, str) else None
        if it is None or not isinstance(iid, str):
            raise InputError(
                f"{where}: item {iid!r} is not in task {task_dir}; import the export of this task's "
                "tasks.json, or read tasks made elsewhere with `labelstudio ratings --rubric`"
            )
        form = for_task(task, it["protocol"]).form
        rubric = rubric_of(task, it["protocol"]) if form["form"] == "scales" else None
        for rater, a in _annotations(t, where, seen, iid, unit):
            answers.append(
                {
                    "rater": rater,
                    "item_id": iid,
                    "unit": unit,
                    "answer": _answer(form, a.get("result") or [], where, rubric),
                    "answered_at": a.get("updated_at") or a.get("created_at"),
                    "revision": 1,
                }
            )
    if not answers:
        raise InputError(f"{export}: no annotations")
    return answers


# Where a task made outside the toolkit may carry what was rated and its context (first found wins).
UNIT_FIELDS = ("item_id", "unit_id", "session_id", "conversation_id", "id")
SYSTEM_FIELDS = ("system", "model")
PATIENT_FIELDS = ("patient_id", "patient")


def import_ratings(export: Path, rubric: Rubric) -> Ratings:
    """Long-format rows (judge/ratings.py) from any Label Studio JSON export whose labeling config names its
    controls after the rubric's items (Rating stars, or Choices of the points): tasks this toolkit made or not.
    The unit is the task data's first of UNIT_FIELDS (with our `unit` appended when an item has several), else
    Label Studio's task id; system and patient are read when the data carries them. Controls that are not items
    of the rubric (comments, other questions) are left alone."""
    from mindsimkit.judge.ratings import RatingRow

    form = protocol(rubric.id, rubric).form
    items = set(rubric.ids)
    out = Ratings([], sources=[str(export)])
    seen: dict[tuple[str, str, str], str] = {}
    for n, t in enumerate(_load_export(export)):
        where = f"{export} task {n}"
        d = _data(t, where)
        unit = next((d[f] for f in UNIT_FIELDS if d.get(f) not in (None, "")), None)
        unit = unit if unit is not None else t.get("id")
        if unit is None or isinstance(unit, (bool, dict, list)):
            raise InputError(
                f"{where}: no id for the rated unit; give the task data one of {', '.join(UNIT_FIELDS)} "
                "(or export with Label Studio's task ids)"
            )
        unit = str(unit) + (f"#{d['unit']}" if str(d.get("unit", "0")) != "0" and "item_id" in d else "")
        system = next((str(d[f]) for f in SYSTEM_FIELDS if d.get(f)), None)
        patient = next((str(d[f]) for f in PATIENT_FIELDS if d.get(f)), None)
        for rater, a in _annotations(t, where, seen, "*", unit):
            by = _results(a.get("result") or [], where)
            found = [name for name in by if name in items]
            for name in found:
                raw = _scale_value(form, name, by, where, rubric)
                if counted_out(raw, rubric, out):
                    continue
                try:
                    out.rows.append(
                        RatingRow(
                            item=name,
                            unit=unit,
                            rater=rater,
                            value=rubric.rating_scale.check(raw),
                            system=system,
                            patient=patient,
                        )
                    )
                except ValueError as exc:
                    raise InputError(f"{where}: {rater} on {name}: {exc}") from None
    if not out.rows:
        raise InputError(
            f"{export}: no ratings of rubric {rubric.id}'s items ({', '.join(rubric.ids)}); name the "
            "labeling config's controls after them"
        )
    return out
