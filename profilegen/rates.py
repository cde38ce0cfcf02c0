"""Presenting-problem rates: the file format, its checks, and fitting one from annotated patients
(MindEval2 §4.1 "Clinical anchor", Appendix C "Presenting problems", Table 16 caption).

A rates file gives P(main | age band, gender) for the 16 main problems and P(secondary | main, age band,
gender) over the 20 other main problems, the 5 secondary-only problems and `none`. The paper fitted its
rates from 1,666 annotated patients; `fit_rates` does the same from any table of (age_band, gender,
main, secondary) rows, shrinking each sparse cell toward its parent (cell → gender or main-problem
margin → overall, add-one at the top) with a pseudo-count `strength`, so an empty cell falls back to the
margin rather than to zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.inputs import MAX_CONFIG_BYTES, read_input_text
from mindsimkit.mindcore import yamlio
from mindsimkit.profilegen.schemas import AGE_BANDS
from mindsimkit.profilegen.vocab import Vocabularies, load_vocabularies

NONE = "none"
GENDERS = ("man", "woman")
DEFAULT_RATES = "rates_default.yaml"
TABLE_COLUMNS = ("age_band", "gender", "main", "secondary")


class MainCell(BaseModel):
    model_config = ConfigDict(extra="forbid")
    age_band: str = Field(description="Age band of the cell.")
    gender: str = Field(description="Gender of the cell.")
    probs: dict[str, float] = Field(description="P(main problem | cell), over the 16 main problems.")


class SecondaryCell(MainCell):
    main: str = Field(description="Main problem the secondary is conditioned on.")
    probs: dict[str, float] = Field(description="P(secondary | main, cell), including 'none'.")


class Rates(BaseModel):
    """A rates file."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(description="Where the numbers come from.")
    version: str = Field(description="Version of the numbers.")
    fitted_from: int | None = Field(None, description="Number of annotated patients, when fitted.")
    main: list[MainCell] = Field(description="One cell per (age band, gender).")
    secondary: list[SecondaryCell] = Field(description="One cell per (main, age band, gender).")

    def main_probs(self, band: str, gender: str) -> dict[str, float]:
        return self._index()[0][(band, gender)]

    def secondary_probs(self, main: str, band: str, gender: str) -> dict[str, float]:
        return self._index()[1][(main, band, gender)]

    def _index(self) -> tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str, str], dict[str, float]]]:
        cached = self.__dict__.get("_idx")
        if cached is None:
            cached = (
                {(c.age_band, c.gender): c.probs for c in self.main},
                {(c.main, c.age_band, c.gender): c.probs for c in self.secondary},
            )
            self.__dict__["_idx"] = cached
        return cached


def check_rates(rates: Rates, voc: Vocabularies, where: str) -> Rates:
    """Every cell present, labels known, each distribution summing to 1; else one ConfigError."""
    faults: list[str] = []
    cells = {(b, g) for b in AGE_BANDS for g in GENDERS}
    main_cells = {(c.age_band, c.gender) for c in rates.main}
    if main_cells != cells or len(rates.main) != len(cells):
        faults.append(f"main needs exactly one cell per age band × gender ({len(cells)})")
    sec_cells = {(c.main, c.age_band, c.gender) for c in rates.secondary}
    want = {(m, b, g) for m in voc.main for b, g in cells}
    if sec_cells != want or len(rates.secondary) != len(want):
        faults.append(f"secondary needs exactly one cell per main × age band × gender ({len(want)})")
    allowed_sec = set(voc.secondary) | {NONE}
    for c in rates.main:
        if set(c.probs) - set(voc.main):
            faults.append(f"main cell {c.age_band}/{c.gender}: unknown problems {sorted(set(c.probs) - set(voc.main))}")
    for c in rates.secondary:
        if set(c.probs) - allowed_sec or c.probs.get(c.main, 0) > 0:
            faults.append(f"secondary cell {c.main}/{c.age_band}/{c.gender}: unknown labels or the main itself")
    for c in [*rates.main, *rates.secondary]:
        total = sum(c.probs.values())
        if any(p < 0 for p in c.probs.values()) or abs(total - 1) > 1e-3:
            faults.append(f"cell {getattr(c, 'main', '')}/{c.age_band}/{c.gender} sums to {total:.4f}, not 1")
    if faults:
        shown = "; ".join(faults[:5]) + (f"; … {len(faults) - 5} more" if len(faults) > 5 else "")
        raise ConfigError(f"rates file {where} is invalid: {shown}")
    return rates


def load_rates(path: str | Path | None = None) -> Rates:
    """Load and check a rates file; None → the shipped illustrative default."""
    if path is None:
        from importlib import resources

        text = (resources.files("mindsimkit.profilegen") / "data" / DEFAULT_RATES).read_text(encoding="utf-8")
        where = f"profilegen/data/{DEFAULT_RATES}"
    else:
        text = read_input_text(path, "rates file", MAX_CONFIG_BYTES, error=ConfigError)
        where = str(path)
    try:
        rates = Rates.model_validate(yamlio.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"rates file {where} is malformed: {exc}") from exc
    return check_rates(rates, load_vocabularies(), where)


def dump_rates(rates: Rates) -> str:
    """YAML text of a rates file (probabilities rounded to 6 places, zeros dropped)."""
    data = rates.model_dump()
    for cell in [*data["main"], *data["secondary"]]:
        cell["probs"] = {k: round(v, 6) for k, v in cell["probs"].items() if round(v, 6) > 0}
    text: str = yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=None)
    return text


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """Annotated patients from CSV, TSV, JSONL or parquet with columns age_band, gender, main, secondary."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"annotation table {path} does not exist")
    if path.suffix == ".parquet":
        from mindsimkit.mindcore.io import read_parquet_rows

        rows = read_parquet_rows(path, "annotation table (parquet)")
    elif path.suffix in (".csv", ".tsv"):
        import csv

        try:
            with path.open(encoding="utf-8-sig", newline="") as fh:
                rows = list(csv.DictReader(fh, delimiter="\t" if path.suffix == ".tsv" else ","))
        except UnicodeDecodeError as exc:
            raise InputError(
                f"annotation table {path}: not UTF-8 text (byte {exc.start + 1}); save it as UTF-8"
            ) from exc
        except csv.Error as exc:
            raise InputError(f"annotation table {path}: not a readable {path.suffix[1:].upper()} file ({exc})") from exc
        if any("\x00" in str(v) for r in rows[:50] for v in r.values()):
            raise InputError(f"annotation table {path}: binary data, not a text table")
    elif path.suffix == ".jsonl":
        from mindsimkit.mindcore.io import read_jsonl

        rows = [obj for _, obj in read_jsonl(path)]
    else:
        raise InputError(f"annotation table {path}: use .csv, .tsv, .jsonl or .parquet")
    missing = [c for c in TABLE_COLUMNS if not rows or c not in rows[0]]
    if missing:
        raise InputError(f"annotation table {path} lacks column(s) {', '.join(missing)} (or has no rows)")
    return rows


def _normalise(x: np.ndarray) -> np.ndarray:
    shares: np.ndarray = x / x.sum(axis=-1, keepdims=True)
    return shares


def fit_rates(rows: list[dict[str, Any]], strength: float = 20.0, where: str = "table") -> Rates:
    """Fit a rates file from annotated patients, shrinking sparse cells toward their margins."""
    voc = load_vocabularies()
    mains, secs = list(voc.main), [*voc.secondary, NONE]
    bi, gi = {b: i for i, b in enumerate(AGE_BANDS)}, {g: i for i, g in enumerate(GENDERS)}
    mi, si = {m: i for i, m in enumerate(mains)}, {s: i for i, s in enumerate(secs)}
    n_main = np.zeros((len(AGE_BANDS), 2, len(mains)))
    n_sec = np.zeros((len(mains), len(AGE_BANDS), 2, len(secs)))
    for k, row in enumerate(rows, 1):
        sec = row.get("secondary") or NONE
        try:
            b, g, m, s = bi[row["age_band"]], gi[row["gender"]], mi[row["main"]], si[sec]
        except KeyError as exc:
            raise InputError(
                f"{where} row {k}: unknown value {exc.args[0]!r} (age_band in {AGE_BANDS}, gender in "
                f"{GENDERS}, main one of the 16 main problems, secondary a problem id or empty)"
            ) from None
        if sec == row["main"]:
            raise InputError(f"{where} row {k}: secondary equals main ({sec})")
        n_main[b, g, m] += 1
        n_sec[m, b, g, s] += 1
    # Main: overall (add-one) → per gender → per (age band, gender).
    overall = _normalise(n_main.sum(axis=(0, 1)) + 1)
    per_gender = _normalise(n_main.sum(axis=0) + strength * overall)
    p_main = _normalise(n_main + strength * per_gender[None, :, :])
    # Secondary: overall (add-one) → per main → per (main, age band, gender); never the main itself.
    own = np.zeros((len(mains), len(secs)), dtype=bool)
    own[np.arange(len(mains)), [si[m] for m in mains]] = True
    sec_overall = np.where(own, 0.0, n_sec.sum(axis=(0, 1, 2)) + 1)
    sec_overall = _normalise(sec_overall)
    per_main = _normalise(np.where(own, 0.0, n_sec.sum(axis=(1, 2)) + strength * sec_overall))
    p_sec = _normalise(np.where(own[:, None, None, :], 0.0, n_sec + strength * per_main[:, None, None, :]))
    rates = Rates(
        source=f"fitted by `mindsim profiles fit-rates` from {len(rows)} annotated patients ({where}), "
        f"hierarchical shrinkage with strength {strength}",
        version="fitted",
        fitted_from=len(rows),
        main=[
            MainCell(age_band=b, gender=g, probs=dict(zip(mains, p_main[bi[b], gi[g]].tolist())))
            for b in AGE_BANDS
            for g in GENDERS
        ],
        secondary=[
            SecondaryCell(
                main=m,
                age_band=b,
                gender=g,
                probs={s: p for s, p in zip(secs, p_sec[mi[m], bi[b], gi[g]].tolist()) if p > 0},
            )
            for m in mains
            for b in AGE_BANDS
            for g in GENDERS
        ],
    )
    return check_rates(rates, voc, where)
