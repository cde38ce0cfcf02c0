"""YAML parsing for recipes, rubrics and shipped data files.

PyYAML's pure-Python loader spends about half a second on the 146 kB presenting-problem rates file that every job
and most profile tests read (8x slower than libyaml, benchmarks/bench_startup.py), so documents are parsed through
libyaml when PyYAML was built with it. libyaml's error messages leave out the quoted line and caret that the
pure-Python loader prints, so a document libyaml refuses is parsed again by the pure-Python loader: the error a
user sees is the same with and without libyaml, and a refusal costs one more parse of a file that is wrong anyway.

A key given twice in one mapping is an error, not "the last one wins": PyYAML keeps the last silently, so a
second `simulation:` block in a recipe dropped every setting of the first without a word.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError


def _no_duplicate_keys(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the base constructor names that problem itself
            break
        if first is not None:
            raise ConstructorError(
                f"while reading the mapping that starts at line {node.start_mark.line + 1}",
                node.start_mark,
                f"the key {key!r} is given twice (first at line {first.line + 1}); keep one of them",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark
    mapping: dict[Any, Any] = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    return mapping


class _PureLoader(yaml.SafeLoader):  # type: ignore[misc]
    construct_mapping = _no_duplicate_keys  # type: ignore[assignment]


_FAST_BASE = getattr(yaml, "CSafeLoader", None)
_FAST: Any = None
if _FAST_BASE is not None:

    class _FastLoader(_FAST_BASE):  # type: ignore[misc, valid-type]
        construct_mapping = _no_duplicate_keys  # type: ignore[assignment]

    _FAST = _FastLoader


def safe_load(text: str) -> Any:
    """`yaml.safe_load(text)`, through libyaml when available, refusing duplicate keys; raises `yaml.YAMLError`
    (with the line of the problem) as the pure loader does."""
    try:
        if _FAST is not None:
            try:
                return yaml.load(text, Loader=_FAST)  # noqa: S506 - a subclass of CSafeLoader, the safe loader's libyaml build
            except yaml.YAMLError:
                pass
        return yaml.load(text, Loader=_PureLoader)  # noqa: S506 - a subclass of SafeLoader
    except RecursionError:
        # Python's stack ends before the nesting does: no file a person writes is this deep.
        raise yaml.YAMLError(
            "nested deeper than this reader follows (lists or mappings inside each other thousands of times)"
        ) from None
