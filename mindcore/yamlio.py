"""YAML parsing for recipes and shipped data files.

PyYAML's pure-Python loader spends about half a second on the 146 kB presenting-problem rates file that every job
and most profile tests read (8x slower than libyaml, benchmarks/bench_startup.py), so documents are parsed through
libyaml when PyYAML was built with it. libyaml's error messages leave out the quoted line and caret that the
pure-Python loader prints, so a document libyaml refuses is parsed again by the pure-Python loader: the error a
user sees is the same with and without libyaml, and a refusal costs one more parse of a file that is wrong anyway.
"""

from __future__ import annotations

from typing import Any

import yaml

_FAST = getattr(yaml, "CSafeLoader", None)


def safe_load(text: str) -> Any:
    """`yaml.safe_load(text)`, through libyaml when available; raises `yaml.YAMLError` as the pure loader does."""
    if _FAST is None:
        return yaml.safe_load(text)
    try:
        return yaml.load(text, Loader=_FAST)  # noqa: S506 - CSafeLoader is the safe loader's libyaml build
    except yaml.YAMLError:
        return yaml.safe_load(text)
