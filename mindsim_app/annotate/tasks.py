"""A task folder: the blinded items of one protocol, who rates what, and (once served) the answers.

Layout (docs/human-evaluation.md):
- `task.json`: the header: protocol, seed, raters, the assignment design, item count, and whether the
  items hold real conversation text (then `publish: never`).
- `items.jsonl`: a header line (`{"header": {...}}`, the same facts) then one item per line: an opaque
  `item_id`, what the page shows (`display`) and the rated `units` (the turns, or the one whole item).
- `assignments.json`: rater → their item ids in the order they see them.
- `answers.sqlite` and `rater-links.txt` (mode 600), written by `mindsim annotate serve`.
The key (item → session, system, patient, seeds) is written apart, by default beside the folder as
`TASK.key.json`, so the folder can be copied to raters' machines without it.

The assignment design follows both papers: each item is rated by `k` of the `n` raters (PatientAct: three of
ten), and an optional subset of items is rated by every rater, for inter-rater agreement (MindEval2 §4.3:
fifteen items). Loads are balanced; every choice is drawn from the task's seed, so the same inputs and seed
give byte-identical files.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.inputs import loads_json, read_input_text
from mindsimkit.mindcore.io import atomic_write_bytes, read_jsonl
from mindsimkit.mindcore.outputs import check_out_file, check_out_folder

FORMAT = "mindsim-annotate/1"
TASK_FILE, ITEMS_FILE, ASSIGN_FILE = "task.json", "items.jsonl", "assignments.json"
ANSWERS_FILE, LINKS_FILE = "answers.sqlite", "rater-links.txt"
# Item ids and rater ids are plain tokens: the server looks them up in memory and never builds a path from them.
ITEM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
RATER_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
REAL_TEXT_NOTICE = (
    "This task holds real conversation text supplied by the user. Keep it on the machines of the "
    "study; never publish, upload or share it."
)


class Design(BaseModel):
    model_config = ConfigDict(extra="forbid")
    raters: list[str] = Field(min_length=1, description="Rater ids")
    k: int = Field(ge=1, description="Raters per item")
    all_raters: int = Field(0, ge=0, description="Items rated by every rater (agreement subset)")


class Header(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str = FORMAT
    protocol: str
    seed: int
    items: int
    units: int = Field(description="Rated units over all items (turns for mhqr/realism windows)")
    design: Design
    real_text: bool = Field(False, description="True when items hold real conversation text")
    publish: str = Field("allowed", description="'never' when the items hold real conversation text")
    notice: Optional[str] = None
    sampler: dict[str, Any] = Field(default_factory=dict, description="The sampler's options")
    rubric: Optional[dict[str, Any]] = Field(
        None,
        description="A user rubric file's content, when the protocol is one "
        "(the folder travels without the file; built-ins come from the registry)",
    )


@dataclass(frozen=True)
class Task:
    root: Path
    header: Header
    items: dict[str, dict[str, Any]]
    assignments: dict[str, list[str]]

    @property
    def protocol(self) -> str:
        return self.header.protocol


def key_path_for(task_dir: Path) -> Path:
    task_dir = Path(task_dir)
    return task_dir.parent / f"{task_dir.name}.key.json"


def item_ids(rng: random.Random, n: int, prefix: str = "i") -> list[str]:
    """n distinct opaque ids drawn from the task's generator."""
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        i = f"{prefix}{rng.getrandbits(48):012x}"
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def system_codes(names: Sequence[str], rng: random.Random) -> dict[str, str]:
    """System name → opaque code (S1, S2, …), the codes shuffled so their order says nothing."""
    names = sorted(set(names))
    codes = [f"S{i + 1}" for i in range(len(names))]
    rng.shuffle(codes)
    return dict(zip(names, codes))


def parse_raters(raters: Optional[str], n: Optional[int]) -> list[str]:
    """`--raters a,b,c` or `--n-raters 3` (R1…Rn)."""
    if raters:
        names = [r.strip() for r in raters.split(",") if r.strip()]
        bad = [r for r in names if not RATER_ID.match(r)]
        if bad:
            raise InputError(f"--raters: {bad[0]!r} is not a rater id (letters, digits, - and _, at most 32)")
        if len(set(names)) != len(names):
            raise InputError("--raters: a rater is named twice")
        return names
    if not n or n < 1:
        raise InputError("give --raters NAME,NAME,… or --n-raters N (at least one rater)")
    return [f"R{i + 1}" for i in range(n)]


def assign(
    items: Sequence[str], design: Design, rng: random.Random, strata: Optional[dict[str, str]] = None
) -> dict[str, list[str]]:
    """Rater → items. The first `design.all_raters` items (drawn evenly over `strata`, e.g. systems) go to
    every rater; each other item to the `k` least-loaded raters, ties broken by the seeded generator. Each
    rater's queue is then shuffled on its own, so raters do not see items in the same order."""
    raters = design.raters
    if design.k > len(raters):
        raise InputError(f"--k {design.k}: only {len(raters)} raters; each item can have at most {len(raters)}")
    if design.all_raters > len(items):
        raise InputError(f"--all-raters {design.all_raters}: only {len(items)} items were drawn")
    pool = list(items)
    common = _even_pick(pool, design.all_raters, strata or {}, rng)
    queue: dict[str, list[str]] = {r: list(common) for r in raters}
    load = {r: len(common) for r in raters}
    shared = set(common)
    rest = [i for i in pool if i not in shared]
    for item in rest:
        order = list(raters)
        rng.shuffle(order)
        order.sort(key=lambda r: load[r])  # stable: equal loads keep the shuffled order
        for r in order[: design.k]:
            queue[r].append(item)
            load[r] += 1
    for r in raters:
        rng.shuffle(queue[r])
    return queue


def _even_pick(items: list[str], n: int, strata: dict[str, str], rng: random.Random) -> list[str]:
    by: dict[str, list[str]] = {}
    for i in items:
        by.setdefault(strata.get(i, ""), []).append(i)
    keys = sorted(by)
    for k in keys:
        rng.shuffle(by[k])
    out: list[str] = []
    while len(out) < n:
        for k in keys:
            if by[k] and len(out) < n:
                out.append(by[k].pop())
    return out


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8")


def write_task(
    task_dir: Path,
    header: Header,
    items: list[dict[str, Any]],
    assignments: dict[str, list[str]],
    key: dict[str, Any],
    key_path: Optional[Path] = None,
) -> dict[str, Any]:
    """Write the task folder and the key apart. Refuses to overwrite a folder that already holds answers."""
    task_dir = Path(task_dir)
    key_path = Path(key_path) if key_path else key_path_for(task_dir)
    if key_path.resolve().is_relative_to(task_dir.resolve()):
        raise InputError(f"--key {key_path}: the key un-blinds the items; write it outside the task folder {task_dir}")
    check_out_folder(task_dir)
    check_out_file(key_path, "--key")
    if (task_dir / ANSWERS_FILE).exists():
        raise InputError(f"{task_dir} already holds answers ({ANSWERS_FILE}); sample into a new folder")
    head = header.model_dump(mode="json")
    lines = [json.dumps({"header": head}, ensure_ascii=False, sort_keys=True)]
    lines += [json.dumps(it, ensure_ascii=False, sort_keys=True) for it in items]
    atomic_write_bytes(task_dir / ITEMS_FILE, ("\n".join(lines) + "\n").encode("utf-8"))
    atomic_write_bytes(task_dir / ASSIGN_FILE, _dumps(assignments))
    # The key un-blinds the raters' items: its owner's eyes only, like the links file.
    atomic_write_bytes(
        key_path, _dumps({"task": task_dir.name, "protocol": header.protocol, "seed": header.seed, **key}), private=True
    )
    atomic_write_bytes(task_dir / TASK_FILE, _dumps(head))  # last: a folder with task.json is complete
    return {
        "task": str(task_dir),
        "key": str(key_path),
        "items": header.items,
        "units": header.units,
        "raters": header.design.raters,
        "real_text": header.real_text,
    }


def load_task(task_dir: Path) -> Task:
    task_dir = Path(task_dir)
    head_path = task_dir / TASK_FILE
    if not head_path.is_file():
        raise InputError(f"{task_dir}: not a task folder (no {TASK_FILE}); make one with `mindsim annotate sample …`")
    try:
        header = Header.model_validate(loads_json(read_input_text(head_path, "task file"), str(head_path)))
        assignments = loads_json(read_input_text(task_dir / ASSIGN_FILE, "task file"), str(task_dir / ASSIGN_FILE))
    except (OSError, ValueError) as exc:
        raise InputError(f"{task_dir}: broken task files ({str(exc).splitlines()[0]}); sample it again") from exc
    items: dict[str, dict[str, Any]] = {}
    for line, obj in read_jsonl(task_dir / ITEMS_FILE):
        if "header" in obj:
            continue
        iid = obj.get("item_id")
        if not isinstance(iid, str) or not ITEM_ID.match(iid):
            raise InputError(f"{task_dir / ITEMS_FILE}:{line}: bad item_id {iid!r}")
        items[iid] = obj
    for r, ids in assignments.items():
        missing = [i for i in ids if i not in items]
        if missing:
            raise InputError(f"{task_dir / ASSIGN_FILE}: rater {r} is assigned unknown item {missing[0]!r}")
    return Task(task_dir, header, items, assignments)


def load_key(path: Path) -> dict[str, Any]:
    text = read_input_text(path, "key file", hint="the sampler writes it beside the task folder as TASK.key.json")
    try:
        key: dict[str, Any] = loads_json(text, str(path))
        return key
    except ValueError as exc:
        raise InputError(f"{path}: not a key file ({exc})") from exc
