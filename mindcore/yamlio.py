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

# Values a document may hold once its aliases are written out: a recipe or rubric holds a few thousand, the
# largest shipped data file about 20,000.
MAX_VALUES = 1_000_000
# Mappings and lists inside one another.
MAX_DEPTH = 100


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
    """`yaml.safe_load(text)`, through libyaml when available, refusing duplicate keys, documents that aliases
    expand past `MAX_VALUES` values or that nest deeper than `MAX_DEPTH`; raises `yaml.YAMLError` (with the
    line of the problem where there is one) as the pure loader does."""
    try:
        data = _load(text)
    except RecursionError:
        raise TooLarge(
            f"the document nests deeper than Python can read (more than {MAX_DEPTH} levels is refused); flatten it"
        ) from None
    check_size(data)
    return data


def _load(text: str) -> Any:
    if _FAST is not None:
        try:
            return yaml.load(text, Loader=_FAST)  # noqa: S506 - a subclass of CSafeLoader, the safe loader's libyaml build
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=_PureLoader)  # noqa: S506 - a subclass of SafeLoader


class TooLarge(yaml.YAMLError):  # type: ignore[misc]
    """A document whose aliases expand it beyond `MAX_VALUES`, that refers to itself, or nests beyond `MAX_DEPTH`."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


def check_size(data: Any) -> int:
    """Values `data` holds once every alias is written out (the loader shares aliased values instead of copying
    them, so a small file can stand for billions: whatever walks it — validation, a request body — would not
    end). `TooLarge` past `MAX_VALUES` or `MAX_DEPTH`, or for a value that contains itself. Linear in the
    distinct values, whatever they expand to."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        items = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
        nested = [c for c in items if isinstance(c, (dict, list))]
        if children_done:
            open_.discard(key)
            size[key] = 1 + len(items) + sum(size[id(c)] - 1 for c in nested)
            depth[key] = 1 + max((depth[id(c)] for c in nested), default=0)
            if size[key] > MAX_VALUES:
                raise TooLarge(
                    f"aliases (*name) expand the document to more than {MAX_VALUES:,} values; "
                    "write the values out, or use fewer aliases"
                )
            if depth[key] > MAX_DEPTH:
                raise TooLarge(f"the document nests more than {MAX_DEPTH} levels deep; flatten it")
            continue
        if key in size:
            continue
        if key in open_:
            raise TooLarge("an alias (*name) refers to a value that contains it, so the value never ends; write it out")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in nested if id(c) not in size)
    return size.get(id(data), 1)
