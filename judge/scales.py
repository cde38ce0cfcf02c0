"""The judge of any `scales` rubric (judge/rubrics.py): one structured answer per rated unit, each item's short
reason written before its value, the values restricted to the rubric's scale by the answer schema. PatientAct's
conversation rubric, MindEval v1's criteria and any user rubric file go through here; only the prompt template
(the rubric's `judge.template`) differs. Invalid output is re-asked by the role client a bounded number of times
and then becomes a counted failure row (judge/patientact.py `Judgment`, `ok=False`), never a blank score.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

import jinja2
from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.prompts import (
    read_text_file,
    render,
    render_problem,
    sandboxed,
    template_hash,
    template_source,
)
from mindsimkit.mindcore.sandbox import check_source, render_bounded
from mindsimkit.judge.rubrics import Rubric, point_type


def judgeable(rubric: Rubric, unit: str | None = None) -> Rubric:
    """The rubric, or one ConfigError saying why this judge cannot score it."""
    if rubric.kind != "scales":
        raise ConfigError(
            f"rubric {rubric.id}: a {rubric.kind} rubric is judged by the MHQR judge, not the scales judge"
        )
    if rubric.judge is None:
        raise ConfigError(
            f"rubric {rubric.id} ({rubric.path}) has no judge: section (no prompt template); it is for "
            "human ratings only. Add judge: {template: judge/scales.jinja2} to judge with it"
        )
    if not rubric.rating_scale.numeric:
        raise ConfigError(
            f"rubric {rubric.id}: the judge scores integer scales; a label scale "
            f"({rubric.rating_scale.describe()}) is rated by people (annotation page, long ratings format)"
        )
    if unit is not None and rubric.unit != unit:
        raise ConfigError(f"rubric {rubric.id} rates one {rubric.unit}; this judge rates one {unit} at a time")
    if unit == "conversation":
        # Rendered once on a stand-in conversation now, so a template that cannot be read, is empty or fails to
        # render stops the command before any engine starts (and before its output folder is made).
        prompt(rubric, transcript=(("patient", "(a patient's words)"), ("counsellor", "(a counsellor's reply)")))
    return rubric


def answer_model(rubric: Rubric, options: Mapping[str, Sequence[str]] | None = None) -> type[BaseModel]:
    """Per item a reason (first, so the value follows from it) then a value on the scale; each pick of the
    rubric chooses among `options[pick.options]`, which the caller supplies."""
    options = options or {}
    missing = [p.options for p in rubric.picks if not options.get(p.options)]
    if missing:
        raise ConfigError(f"rubric {rubric.id}: the caller must supply the options of {', '.join(missing)}")
    picks = tuple((p.id, p.name, tuple(sorted(options[p.options]))) for p in rubric.picks)
    # One model class per rubric text and options: the role client caches schemas by class.
    key = (rubric.model_dump_json(), picks)
    if key not in _MODELS:
        _MODELS[key] = _answer_model(rubric, picks)
    return _MODELS[key]


_MODELS: dict[tuple[str, tuple[tuple[str, str, tuple[str, ...]], ...]], type[BaseModel]] = {}


def _answer_model(rubric: Rubric, picks: tuple[tuple[str, str, tuple[str, ...]], ...]) -> type[BaseModel]:
    spec: dict[str, Any] = {}
    for it in rubric.items:
        spec[f"{it.id}_reason"] = (
            str,
            Field(max_length=rubric.judge_spec.reason_max, description=f"One or two sentences on: {it.question}"),
        )
        spec[it.id] = (
            point_type(rubric.rating_scale),
            Field(description=f"{it.name}, {rubric.rating_scale.describe()}"),
        )
    for pid, name, opts in picks:
        spec[pid] = (Literal[opts], Field(description=name))
    return create_model(f"{rubric.id.title().replace('_', '')}Judgment", __config__=ConfigDict(extra="forbid"), **spec)


def dimensions(rubric: Rubric) -> list[dict[str, Any]]:
    """The items as the prompt templates read them: id, name, question and every point's anchor."""
    return [
        {"id": it.id, "name": it.name, "question": it.question, "anchors": rubric.anchors(it)} for it in rubric.items
    ]


def _beside_source(rubric: Rubric) -> str | None:
    """The text of a judge template beside the rubric file (None: a shipped template under prompts/)."""
    path = rubric.beside(rubric.judge_spec.template, "judge.template")
    if path is None:
        try:
            source = template_source(rubric.judge_spec.template)
        except ConfigError as exc:
            raise ConfigError(f"rubric {rubric.path}: judge.{exc}") from None
    else:
        if not path.is_file():
            raise ConfigError(
                f"rubric {rubric.path}: judge.template: {path} not found (paths are relative to the rubric file)"
            )
        source = read_text_file(path, f"rubric {rubric.path}: judge.template")
    if not source.strip():
        raise ConfigError(
            f"rubric {rubric.path}: judge.template {rubric.judge_spec.template} is empty; every unit would "
            "be judged on an empty prompt. Give it the text of the judge's prompt"
        )
    if path is None:
        return None
    _checked(rubric, source, f"rubric {rubric.path}: judge.template {path}")
    return source


def _checked(rubric: Rubric, source: str, where: str) -> str:
    """`source` once the sandbox's static check passed (a shared rubric's template may not reach Python internals)."""
    try:
        check_source(sandboxed(), source, where)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(
            f"rubric {rubric.path}: judge.template {rubric.judge_spec.template}: {render_problem(exc)}"
        ) from None
    return source


def _beside_env(rubric: Rubric) -> jinja2.Environment:
    """Jinja for a template beside the rubric: `{% include %}` / `{% import %}` reach files in the rubric's own
    folder only (the same rule as the template itself), never anything else on the machine."""

    def load(name: str) -> str | None:
        path = rubric.beside(name if name.startswith(("./", "/")) else f"./{name}", f"judge.template include {name!r}")
        if path is None:  # a rubric not read from a file has no folder to include from: jinja says not found
            return None
        return _checked(
            rubric,
            read_text_file(path, f"rubric {rubric.path}: include"),
            f"rubric {rubric.path}: judge.template include {path}",
        )

    return sandboxed(jinja2.FunctionLoader(load))


def prompt(rubric: Rubric, **variables: Any) -> str:
    """The rubric's judge prompt with the rubric's own parts filled in (instructions, dimensions, notes as
    `red_flags`, the scale) plus the caller's (`transcript`, profile fields, …)."""
    parts = {
        "instructions": rubric.judge_spec.instructions,
        "dimensions": dimensions(rubric),
        "red_flags": list(rubric.judge_spec.notes),
        "scale": rubric.rating_scale.describe(),
        **variables,
    }
    source = _beside_source(rubric)
    if source is None:
        return render(rubric.judge_spec.template, **parts)
    try:
        return render_bounded(_beside_env(rubric).from_string(source), parts).strip()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything raised while rendering is the template's problem
        raise ConfigError(
            f"rubric {rubric.path}: judge.template {rubric.judge_spec.template}: {render_problem(exc)}"
        ) from None


def prompt_hashes(rubric: Rubric) -> dict[str, str]:
    """Template name → hash, recorded in every row (a template beside the rubric file is hashed from its text)."""
    import hashlib

    source = _beside_source(rubric)
    if source is None:
        return {rubric.judge_spec.template: template_hash(rubric.judge_spec.template)}
    return {rubric.judge_spec.template: hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]}
