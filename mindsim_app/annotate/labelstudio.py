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

import json
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from mindcore.errors import InputError
from mindcore.io import atomic_write_json, atomic_write_text
from mindsim_app.annotate.protocol import DIVERSITY, protocol, realism_reasons
from mindsim_app.annotate.tasks import load_task


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


def _rating(name: str, to: str) -> str:
    return f'  <Rating name={quoteattr(name)} toName={quoteattr(to)} maxRating="5" required="true"/>\n'


def config(protocol_name: str) -> str:
    """The labeling config of one protocol (Label Studio XML)."""
    f = protocol(protocol_name).form
    parts = ["<View>\n"]
    if protocol_name == DIVERSITY:
        parts += [_header(f["question"]), '  <Text name="note" value="$note"/>\n',
                  _header(" · ".join(f"{k} {v}" for k, v in f["scale"].items())), _rating("rating", "note"),
                  _textarea("comment", "note", 2000)]
        return "".join(parts) + "</View>\n"
    parts.append(_header(f["title"]))
    if f.get("instructions"):
        parts.append(_header(f["instructions"], small=True))
    if protocol_name == "mhqr":
        parts += [_header("The counsellor's instructions"), '  <Text name="system_prompt" value="$system_prompt"/>\n']
    if protocol_name == "patientact_profile":
        parts += ['  <Paragraphs name="profile" value="$profile" nameKey="author" textKey="text"/>\n']
        to = "profile"
    else:
        parts += ['  <Paragraphs name="dialogue" value="$messages" layout="dialogue" nameKey="author" textKey="text"/>\n']
        to = "dialogue"
    if protocol_name in ("mhqr", "realism"):
        parts += [_header("Rate this reply"), '  <Text name="rated" value="$rated"/>\n']
        to = "rated"
    if protocol_name == "mhqr":
        parts.append(_choices("severity", to, [(s["id"], s["name"]) for s in f["severities"]], False))
        parts.append(_choices("issues", to, [(i["id"], f"{c['name']}: {i['name']}") for c in f["categories"]
                                             for i in c["issues"]], True, required=False))
        parts += [_header("Quote (optional)"), _textarea("quote", to, f["quote_max_chars"])]
    elif protocol_name == "realism":
        for g in f["groups"]:
            opts = [(r["id"], r["name"]) for r in g["reasons"]] + [(f"{g['id']}_other", "Other"), (f"{g['id']}_none", "None")]
            parts += [_header(f"1. {g['name']} reasons"), _choices(g["id"], to, opts, True),
                      _textarea(f"{g['id']}_other_text", to, f["other_max_chars"])]
        parts += [_header("2. " + f["question"] + " (" + ", ".join(f"{k} {v}" for k, v in f["scale"].items()) + ")"),
                  _rating("rating", to)]
    else:
        for d in f["dimensions"]:
            anchors = "; ".join(f"{k}: {v}" for k, v in d["anchors"].items())
            parts += [_header(f"{d['name']}: {d['question']}"), _header(anchors, small=True), _rating(d["id"], to)]
        if protocol_name == "patientact_profile":
            parts += [_header("Attachment style that fits best"),
                      _choices("attachment", to, [(a["id"], a["text"]) for a in f["attachments"]], False),
                      _header("Core-belief theme that fits best"),
                      _choices("theme", to, [(t["id"], t["text"]) for t in f["themes"]], False)]
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
            if it["protocol"] == "mhqr":
                msgs = msgs[: u["message"] + 1]
                data["system_prompt"] = d["system_prompt"]
            if it["protocol"] == "patientact_profile":
                data["profile"] = [{"author": s["title"], "text": "\n".join(s["lines"])} for s in d["sections"]]
            else:
                data["messages"] = [{"author": _author(m["speaker"]) + (" ◀ rate this" if i == u.get("message") else ""),
                                     "text": m["text"]} for i, m in enumerate(msgs)]
            if "message" in u:
                data["rated"] = msgs[u["message"]]["text"]
            tasks.append({"data": data})
            n += 1
    out = Path(out)
    atomic_write_json(out / "tasks.json", tasks)
    atomic_write_text(out / "config.xml", config(task.protocol))
    result = {"tasks": n, "tasks_file": str(out / "tasks.json"), "config_file": str(out / "config.xml")}
    if DIVERSITY in task.items:
        div = [{"data": {"item_id": DIVERSITY, "unit": "0", "assigned": r,
                         "note": f"For {r}: answer once, after rating all your profiles."}} for r in task.assignments]
        atomic_write_json(out / "diversity" / "tasks.json", div)
        atomic_write_text(out / "diversity" / "config.xml", config(DIVERSITY))
        result["diversity_tasks_file"] = str(out / "diversity" / "tasks.json")
    return result


def _rater(completed_by: Any, where: str) -> str:
    if isinstance(completed_by, dict):
        completed_by = completed_by.get("email") or completed_by.get("username") or completed_by.get("id")
    if completed_by is None or completed_by == "":
        raise InputError(f"{where}: annotation without completed_by; export from Label Studio with annotator details")
    text = str(completed_by)
    return text.split("@", 1)[0] if "@" in text else text


def _answer(proto: str, results: list[dict[str, Any]], where: str) -> dict[str, Any]:
    by: dict[str, dict[str, Any]] = {}
    for r in results:
        if "from_name" in r and isinstance(r.get("value"), dict):
            by[r["from_name"]] = r["value"]

    def choices(name: str) -> list[str]:
        return list((by.get(name) or {}).get("choices") or [])

    def text(name: str) -> str | None:
        t = (by.get(name) or {}).get("text")
        t = "\n".join(t) if isinstance(t, list) else t
        return t.strip() if isinstance(t, str) and t.strip() else None

    def rating(name: str) -> Any:
        return (by.get(name) or {}).get("rating")

    out: dict[str, Any] = {}
    if proto == "mhqr":
        sev = choices("severity")
        out = {"severity": sev[0] if sev else None, "issues": choices("issues"), "quote": text("quote")}
    elif proto == "realism":
        groups = realism_reasons()
        other = {g: text(f"{g}_other_text") for g in groups if text(f"{g}_other_text")}
        out = {"reasons": [c for g in groups for c in choices(g)], "other": other or None, "rating": rating("rating")}
    elif proto == DIVERSITY:
        out = {"rating": rating("rating")}
    else:
        dims = [d["id"] for d in protocol(proto).form["dimensions"]]
        out = {"scores": {d: rating(d) for d in dims if rating(d) is not None}}
        if proto == "patientact_profile":
            a, t = choices("attachment"), choices("theme")
            out.update(attachment=a[0] if a else None, theme=t[0] if t else None)
    out["comment"] = text("comment")
    return {k: v for k, v in out.items() if v is not None}


def import_labelstudio(task_dir: Path, export: Path) -> list[dict[str, Any]]:
    """Answers (rater, item_id, unit, answer) from Label Studio's JSON export of this task's projects."""
    task = load_task(task_dir)
    try:
        data = json.loads(Path(export).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{export}: not a Label Studio JSON export ({exc})") from exc
    if not isinstance(data, list):
        raise InputError(f"{export}: expected a JSON list of tasks (Label Studio's 'JSON' export)")
    answers, seen = [], {}
    for n, t in enumerate(data):
        where = f"{export} task {n}"
        d = (t or {}).get("data") or {}
        iid, unit = d.get("item_id"), str(d.get("unit", ""))
        it = task.items.get(iid) if isinstance(iid, str) else None
        if it is None:
            raise InputError(f"{where}: item {iid!r} is not in task {task_dir}; import the export of this task's tasks.json")
        for a in t.get("annotations") or []:
            if a.get("was_cancelled"):
                continue
            rater = _rater(a.get("completed_by"), where)
            k = (rater, iid, unit)
            if k in seen:
                raise InputError(f"{where}: {rater} annotated item {iid} unit {unit} twice (also {seen[k]}); keep one")
            seen[k] = where
            answers.append({"rater": rater, "item_id": iid, "unit": unit, "answer": _answer(it["protocol"], a.get("result") or [], where),
                            "answered_at": a.get("updated_at") or a.get("created_at"), "revision": 1})
    if not answers:
        raise InputError(f"{export}: no annotations")
    return answers
