"""The one Jinja environment every prompt, rubric and card template renders in.

Rubrics and recipes are files people share, and their templates are rendered on the user's machine with the user's
environment: a template must not reach Python internals (`cycler.__init__.__globals__.os`), the environment or the
file system, and must not be able to hang the command or fill its memory. So every template renders in Jinja's
immutable sandbox, with:

- a static check when the template is read (`check_source`): any attribute or key that starts with `_` is refused
  with the file and the line, before any engine starts, whether or not that line would ever render;
- methods callable only on plain data (strings, lists, dicts, numbers, Jinja's own loop helpers): the objects the
  toolkit passes in expose their fields, never their methods (a pydantic model's `parse_file` reads files);
- bounds on one render (`render_bounded`): loop iterations plus calls (`MAX_STEPS`), wall time (`MAX_SECONDS`), the
  length of any string or list it builds and of its output (`MAX_OUTPUT`), and the size of a number passed to a
  call or filter (`MAX_ARGUMENT`). Past one, the render stops with `TemplateLimit`, one line saying which.

The shipped templates render here too (a test renders each of them both ways and compares the bytes).
"""

from __future__ import annotations

import re
import string
import time
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from typing import Any, Callable, Iterable, Iterator

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context, LoopContext, Undefined
from jinja2.utils import Cycler, Joiner, Namespace
from jinja2.exceptions import SecurityError
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import _PassArg  # how Jinja marks a filter that takes its context first
from jinja2.visitor import NodeTransformer

from mindsimkit.mindcore.errors import ConfigError

MAX_OUTPUT = 2_000_000  # characters: a rendered prompt, or any string or list built on the way to it
MAX_STEPS = 1_000_000  # loop iterations plus calls in one render
MAX_SECONDS = 10.0  # wall time of one render
MAX_ARGUMENT = 10_000  # largest number given to a call or filter (a width, a count); `range` has Jinja's own cap
_MAX_POWER_BITS = 100_000  # `a ** b` and `a * b` of integers wider than this are refused before Python computes them

_COUNTED = "mindsim_counted"  # the filter every `for` loop's iterable is passed through (see `_Bounds`)
_SIZED = "mindsim_sized"  # the filter every `~` join and `{% set %}` block is passed through

# Types whose methods a template may call: plain data and Jinja's own helpers. Anything else the toolkit passes in
# (pydantic rows, dataclasses) shows its fields only.
_PLAIN = (
    str,
    bytes,
    int,
    float,
    bool,
    list,
    tuple,
    dict,
    set,
    frozenset,
    type(None),
    LoopContext,
    Cycler,
    Joiner,
    Namespace,
    Undefined,
)


class TemplateLimit(SecurityError):
    """A render went past one of the bounds above, or reached for something a template may not touch."""


@dataclass
class _Budget:
    steps: int
    deadline: float


_BUDGET: ContextVar[_Budget | None] = ContextVar("mindsim_template_budget", default=None)


def _tick(n: int = 1) -> None:
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.steps -= n
    if budget.steps < 0:
        raise TemplateLimit(
            f"the template ran more than {MAX_STEPS:,} loop steps and calls; templates are bounded "
            "(docs/prompts.md): shorten its loops"
        )
    if budget.steps % 1024 == 0 and time.monotonic() > budget.deadline:
        raise TemplateLimit(
            f"the template ran longer than {MAX_SECONDS:g} s; templates are bounded "
            "(docs/prompts.md): shorten its loops"
        )


def _sized(value: Any, what: str = "the template built a value") -> Any:
    if isinstance(value, (str, list, tuple, dict)) and len(value) > MAX_OUTPUT:
        raise TemplateLimit(
            f"{what} of {len(value):,} characters or items, over the {MAX_OUTPUT:,} a template may "
            "build (docs/prompts.md)"
        )
    return value


def _argument(value: Any, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_ARGUMENT:
        raise TemplateLimit(
            f"{what} is given {value:,}, over the {MAX_ARGUMENT:,} a template may pass (docs/prompts.md)"
        )


def _range(*args: int) -> range:
    """Jinja's sandboxed `range`, refused in the toolkit's words past Jinja's cap."""
    try:
        return safe_range(*args)
    except OverflowError:
        raise TemplateLimit(
            f"range{args} has more than {MAX_RANGE:,} numbers, the most a template may loop over (docs/prompts.md)"
        ) from None


def _counted(iterable: Iterable[Any]) -> Iterator[Any]:
    for item in iterable:
        _tick()
        yield item


_PERCENT_SPEC = re.compile(r"%[^a-zA-Z%]*[a-zA-Z%]")
_DIGITS = re.compile(r"\d+")


def _check_spec(spec: str, what: str) -> None:
    if "*" in spec:
        raise TemplateLimit(f"{what}: a '*' width or precision is not allowed in templates (docs/prompts.md)")
    for digits in _DIGITS.findall(spec):
        _argument(int(digits), what)


def _check_percent(fmt: str) -> None:
    for spec in _PERCENT_SPEC.findall(fmt):
        _check_spec(spec, "a '%' format")


def _check_format(fmt: str) -> None:
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error itself
    for _, _, spec, _ in fields:
        if spec:
            _check_spec(spec, "a '{}' format")


def _replace_size(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        _sized_length(len(text) + hits * (len(new) - len(old)))


def _sized_length(n: int) -> None:
    if n > MAX_OUTPUT:
        raise TemplateLimit(
            f"the template would build a value of {n:,} characters or items, over the {MAX_OUTPUT:,} a "
            "template may build (docs/prompts.md)"
        )


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    skip = 1 if _PassArg.from_obj(func) is not None else 0  # Jinja passes its context / environment first

    @wraps(func)  # keeps Jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        plain = args[skip:]
        for value in (*plain[1:], *kwargs.values()):  # the arguments, not the value piped in
            _argument(value, f"filter '{name}'")
        if name == "replace" and len(plain) >= 3:
            _replace_size(*plain[:4])
        if name == "format" and plain and isinstance(plain[0], str):
            _check_percent(plain[0])
        return _sized(func(*args, **kwargs), f"filter '{name}' built a value")

    return bounded


class _Bounds(NodeTransformer):
    """Passes every loop's iterable through the step counter and every built string through the size check, so
    nested loops and doubling strings stop at the bounds instead of running on."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, _COUNTED, [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(node, _SIZED, [], [], None, None, lineno=node.lineno)

    def visit_AssignBlock(self, node: nodes.AssignBlock) -> nodes.Node:
        self.generic_visit(node)
        node.filter = nodes.Filter(node.filter, _SIZED, [], [], None, None, lineno=node.lineno)
        return node


class PromptSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the toolkit's bounds (module docstring)."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # lipsum writes paragraphs of filler with no bound; no prompt needs it.
        self.globals.pop("lipsum", None)
        self.globals["range"] = _range
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters[_COUNTED] = _counted
        self.filters[_SIZED] = _sized

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        return _Bounds().visit(tree)  # type: ignore[no-any-return]

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        return not callable(value) or isinstance(obj, _PLAIN)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _tick()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, bytes)):  # widths and counts of string methods (center, zfill, replace, ...)
            for value in (*args, *kwargs.values()):
                _argument(value, f"{type(owner).__name__}.{getattr(__obj, '__name__', '?')}")
            if getattr(__obj, "__name__", None) == "replace":
                _replace_size(owner, *args[:3])
        return _sized(super().call(__context, __obj, *args, **kwargs), "a call built a value")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        _check_format(value.__self__)
        return wrapped

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                _sized_length(len(left) + len(right))
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    _sized_length(len(seq) * n)
            if _integers(left, right) and left.bit_length() + right.bit_length() > _MAX_POWER_BITS:
                raise TemplateLimit(f"'{operator}' would make too large a number for a template (docs/prompts.md)")
        elif operator == "**":
            if (
                _integers(left, right)
                and right > 0
                and abs(left) > 1
                and (right * abs(left).bit_length() > _MAX_POWER_BITS)
            ):
                raise TemplateLimit(f"'{operator}' would make too large a number for a template (docs/prompts.md)")
        elif operator == "%" and isinstance(left, str):
            _check_percent(left)
        return _sized(super().call_binop(context, operator, left, right), f"'{operator}' built a value")


def _integers(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def render_bounded(template: jinja2.Template, variables: dict[str, Any]) -> str:
    """`template.render(**variables)` within the bounds: the steps and the time of this render, and its output's
    length, counted as it is produced."""
    token = _BUDGET.set(_Budget(MAX_STEPS, time.monotonic() + MAX_SECONDS))
    try:
        parts: list[str] = []
        size = 0
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise TemplateLimit(
                    f"the rendered text passed {MAX_OUTPUT:,} characters; templates are bounded "
                    "(docs/prompts.md): shorten its loops"
                )
            parts.append(chunk)
        return "".join(parts)
    finally:
        _BUDGET.reset(token)


# -- the static check --------------------------------------------------------------------------------------------
def internals_read(tree: nodes.Template) -> list[tuple[int, str]]:
    """(line, what) for every place the parsed template reaches for a name that starts with `_` (`x.__class__`,
    `x['__globals__']`, `x|attr('__init__')`) or picks an attribute by a computed name (`x|attr(name)`): the ways
    into Python's internals. Empty for a template that only reads what it is given."""
    found: list[tuple[int, str]] = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter)):
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            found.append((node.lineno, f"reads .{node.attr}, a Python internal"))
        elif (
            isinstance(node, nodes.Getitem)
            and isinstance(node.arg, nodes.Const)
            and isinstance(node.arg.value, str)
            and node.arg.value.startswith("_")
        ):
            found.append((node.lineno, f"reads [{node.arg.value!r}], a Python internal"))
        elif isinstance(node, nodes.Filter) and node.name == "attr":
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, nodes.Const) and isinstance(arg.value, str)):
                found.append((node.lineno, "picks an attribute by a name computed at render time (|attr)"))
            elif arg.value.startswith("_"):
                found.append((node.lineno, f"reads |attr({arg.value!r}), a Python internal"))
    return sorted(found, key=lambda f: f[0])


def check_source(env: jinja2.Environment, source: str, where: str) -> nodes.Template:
    """Parse `source` and refuse (ConfigError naming `where` and the line) a template that reaches for Python
    internals. A syntax error is left to the caller (it says it in its own words)."""
    tree = env.parse(source)
    found = internals_read(tree)
    if found:
        line, what = found[0]
        raise ConfigError(
            f"{where}:{line}: {what}; templates render in a sandbox and may read only the values "
            "they are given, never a name that starts with '_' (docs/prompts.md): remove it"
        )
    return tree
