"""Worst-case output tokens of a JSON schema, so a structured role's `max_tokens` can be checked
against the longest answer its schema allows before any call is made.

A grammar-constrained engine can only stop early, never late: if the budget covers the longest JSON
the schema admits, no answer can be cut off mid-string. The bound is built from the schema alone:

- literal text (key names, JSON punctuation, `enum` and `const` values, `true`/`false`/`null`) is
  counted with the engine's own tokenizer when it serves one (llama.cpp and vLLM answer
  `POST /tokenize`), else as its UTF-8 bytes;
- free text (a string's content up to `maxLength` characters) is counted at
  `CONTENT_TOKENS_PER_CHAR` = 1 token per character, whichever counter is used;
- numbers are counted per character of the longest literal llama.cpp's JSON grammar admits.

Why 1 token per character (and per byte for literals) is safe: the tokenizers these engines serve are
byte-level BPE (GPT-2 style: SmolLM2, Llama 3, Qwen) or SentencePiece with byte fallback, so every
token covers at least one byte, and an ASCII character is one byte. Where it is not safe: a string
made of non-ASCII characters (up to 4 bytes each) or JSON escapes (`\\u00e9` is 6 characters for one
counted character) can take more tokens than characters; the grammar allows both. Literals counted by
a tokenizer assume the model writes them in the tokenizer's own split (a model trained on that
tokenizer does); one that spelled key names byte by byte could exceed that part of the count.
Whitespace: llama.cpp's grammar allows a gap (`"\\n"{1,2} [ \\t]{0,20}`) after `{`, `[`, `,`, `:`, each key
and each value. Each gap inside the answer is counted as `GAP_TOKENS` = 2 tokens, whichever counter is
used: in our probes SmolLM2 wrote at most 2 whitespace tokens in any gap inside an answer (often "\\n",
"\\n", split non-canonically), while it did run the gap after the closing brace to the grammar's cap of
22 characters — that one is not counted, because the JSON is already complete when it starts. A model
that padded every inner gap to 22 characters could exceed this part of the bound.
Every string adds one token for the quote/content boundary, and every answer one for end-of-turn.

Whether a server's grammar actually enforces `maxLength` is an engine property, not a schema one:
measured on the embedded llama.cpp (xllamacpp) with SmolLM2-135M, see
`tests/mindcore/test_budget.py::test_embedded_tokenizer_and_maxlength_grammar` — a `maxLength: 10`
string asked to hold a long story came back with at most 10 characters (3 of 3 seeds). The same
probes show why literals are not safe at the tokenizer's count: the model's tokens under a grammar
are not the tokenizer's split (" h", "ul" for " hul"; "\\n", "\\n" for "\\n\\n"), and a 32-character
answer took 41 completion tokens, 22 of them whitespace around and after the JSON. The tokenizer's
count of literals is kept anyway because the content term has far more slack than the literals can
eat: it charges one token per character where the model's English runs near 4 characters per token
(a screener answer: 1,237 characters in 330 tokens), while literals are about a ninth of the bound
(formulation: 312 of 2,765 tokens with SmolLM2's tokenizer; 692 of 3,145 by bytes). Only an answer whose
every string is written one character per token and whose literals are split byte by byte would pass
the tokenizer-counted bound; the byte bound covers even that.

A string without `maxLength` (or an array without `maxItems`, an object open to any keys, a `$ref`
cycle) makes the worst case unbounded; it is reported by path, never guessed.

Stages register their structured roles here (`register_role_schema`) so the checker does not import
them: `mindcore` knows schemas, not stages.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from mindsimkit.mindcore import wire
from mindsimkit.mindcore.errors import TransportError
from mindsimkit.mindcore.redact import shown_url

TokenCounter = Callable[[str], int]

CONTENT_TOKENS_PER_CHAR = 1.0
STRING_BOUNDARY_TOKENS = 1
END_OF_TURN_TOKENS = 1
GAP_TOKENS = 2
# llama.cpp's json-schema-to-grammar: integral part [1-9][0-9]{0,15}, decimal [0-9]{1,16}, exponent
# like the integral part; so "-" + 16 + "." + 16 + "e-" + 16 characters at most.
_INT_CHARS = 17
_NUMBER_CHARS = 17 + 1 + 16 + 2 + 16


def byte_counter(text: str) -> int:
    """The tokenizer-free bound: one token per UTF-8 byte (see the module docstring)."""
    return len(text.encode("utf-8"))


@dataclass
class WorstCase:
    """The longest answer a schema admits, in tokens; `tokens` is None when `unbounded` names why."""

    schema_name: str
    tokens: int | None
    unbounded: list[str] = field(default_factory=list)
    counted_with: str = "bytes"

    @property
    def bounded(self) -> bool:
        return self.tokens is not None


class _Unbounded(Exception):
    pass


class _Walker:
    """Mirrors llama.cpp's json-schema-to-grammar: `cost` is a value without its trailing gap;
    containers add one gap after `{`/`[`, each key, each `:`, each `,` and each member value."""

    def __init__(self, root: dict[str, Any], count: TokenCounter):
        self.root = root
        self.count = count
        self.cache: dict[str, int] = {}
        self.unbounded: list[str] = []

    def lit(self, text: str) -> int:
        if text not in self.cache:
            self.cache[text] = self.count(text) if text else 0
        return self.cache[text]

    def resolve(self, ref: str, stack: tuple[str, ...], path: str) -> dict[str, Any]:
        if not ref.startswith("#/"):
            raise self.fail(path, f"external $ref {ref}")
        if ref in stack:
            raise self.fail(path, f"recursive $ref {ref}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        target: dict[str, Any] = node  # pydantic's $refs name entries of $defs, each a schema object
        return target

    def fail(self, path: str, why: str) -> _Unbounded:
        self.unbounded.append(f"{path or '(root)'}: {why}")
        return _Unbounded()

    def cost(self, s: Any, path: str, stack: tuple[str, ...] = ()) -> int:
        if s is True or s == {}:
            raise self.fail(path, "any value allowed")
        if s is False:
            return 0
        if "$ref" in s:
            target = self.resolve(s["$ref"], stack, path)
            rest = {k: v for k, v in s.items() if k not in ("$ref", "description", "title", "default")}
            inner = self.cost(target, path, stack + (s["$ref"],))
            return max(inner, self.cost(rest, path, stack)) if rest else inner
        if "const" in s:
            return self.lit(json.dumps(s["const"], ensure_ascii=False))
        if "enum" in s:
            return max(self.lit(json.dumps(v, ensure_ascii=False)) for v in s["enum"])
        for key in ("anyOf", "oneOf"):
            if key in s:
                return max(self.cost(o, path, stack) for o in s[key])
        if "allOf" in s:
            # pydantic only emits allOf to wrap a single $ref; several parts narrow each other, so the
            # largest part still bounds the whole.
            return max(self.cost(o, path, stack) for o in s["allOf"])
        t = s.get("type")
        if isinstance(t, list):
            return max(self.cost({**s, "type": one}, path, stack) for one in t)
        if t == "string":
            if "maxLength" not in s:
                raise self.fail(path, "string without maxLength")
            content = math.ceil(int(s["maxLength"]) * CONTENT_TOKENS_PER_CHAR)
            return self.lit('""') + content + STRING_BOUNDARY_TOKENS
        if t == "integer":
            return _INT_CHARS if not _bounded_range(s) else max(len(str(int(s[k]))) for k in _range_keys(s))
        if t == "number":
            return _NUMBER_CHARS
        if t == "boolean":
            return max(self.lit("true"), self.lit("false"))
        if t == "null":
            return self.lit("null")
        if t == "array":
            return self.array(s, path, stack)
        if t == "object" or "properties" in s:
            return self.object(s, path, stack)
        raise self.fail(path, f"no type ({', '.join(sorted(s)) or 'empty schema'})")

    def array(self, s: dict[str, Any], path: str, stack: tuple[str, ...]) -> int:
        n = s.get("maxItems")
        if n is None:
            raise self.fail(path, "array without maxItems")
        items = s.get("items")
        if items is None:
            raise self.fail(path + "[]", "array items without a schema")
        n = int(n)
        total = self.lit("[") + GAP_TOKENS + self.lit("]")
        if n:
            item = self.cost(items, path + "[]", stack) + GAP_TOKENS
            total += n * item + (n - 1) * (self.lit(",") + GAP_TOKENS)
        return total

    def object(self, s: dict[str, Any], path: str, stack: tuple[str, ...]) -> int:
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        if extra not in (None, False) or s.get("patternProperties") or not props:
            raise self.fail(path, "object open to any keys")
        total = self.lit("{") + GAP_TOKENS + self.lit("}")
        for key, sub in props.items():
            total += self.lit(json.dumps(key, ensure_ascii=False)) + GAP_TOKENS + self.lit(":") + GAP_TOKENS
            total += self.cost(sub, f"{path}.{key}" if path else key, stack) + GAP_TOKENS
        return total + (len(props) - 1) * (self.lit(",") + GAP_TOKENS)


def _range_keys(s: dict[str, Any]) -> tuple[str, str]:
    lo = "minimum" if "minimum" in s else "exclusiveMinimum"
    hi = "maximum" if "maximum" in s else "exclusiveMaximum"
    return lo, hi


def _bounded_range(s: dict[str, Any]) -> bool:
    lo, hi = _range_keys(s)
    return lo in s and hi in s


def worst_case_tokens(
    schema: dict[str, Any], *, name: str = "output", count: TokenCounter | None = None, counted_with: str | None = None
) -> WorstCase:
    """The longest answer `schema` admits, in tokens (see the module docstring for the rules)."""
    walker = _Walker(schema, count or byte_counter)
    try:
        tokens: int | None = GAP_TOKENS + walker.cost(schema, "") + END_OF_TURN_TOKENS
    except _Unbounded:
        tokens = None
    how = counted_with or ("bytes" if count is None else "tokenizer")
    return WorstCase(schema_name=name, tokens=tokens, unbounded=walker.unbounded, counted_with=how)


# -- a largest instance, for prompt-size estimates ---------------------------------------------
FILLER = (
    "She has not slept well since the move and keeps going over the argument with her brother, "
    "telling herself it will pass once work calms down. "
)


def fill_text(chars: int, filler: str = FILLER) -> str:
    """English-like text of exactly `chars` characters (prompt estimates need realistic tokens, not 'xxx')."""
    return (filler * (chars // len(filler) + 1))[:chars]


def largest_instance(schema: dict[str, Any], filler: str = FILLER) -> Any:
    """A JSON value of `schema` at its length limits: strings filled to `maxLength`, arrays at
    `maxItems` (the i-th item takes the i-th longest enum value, so label-unique lists stay full),
    every object property present, the longest `anyOf` branch. Raises ValueError when unbounded."""

    def pick(values: list[Any], i: int) -> Any:
        ranked = sorted(values, key=lambda v: -len(json.dumps(v)))
        return ranked[i % len(ranked)]

    def build(s: Any, i: int, stack: tuple[str, ...]) -> Any:
        if "$ref" in s:
            ref = s["$ref"]
            if ref in stack:
                raise ValueError(f"recursive $ref {ref}")
            node: Any = schema
            for part in ref[2:].split("/"):
                node = node[part]
            return build(node, i, stack + (ref,))
        if "const" in s:
            return s["const"]
        if "enum" in s:
            return pick(list(s["enum"]), i)
        for key in ("anyOf", "oneOf", "allOf"):
            if key in s:
                options = [o for o in s[key] if o.get("type") != "null"] or s[key]
                built = [build(o, i, stack) for o in options]
                return max(built, key=lambda v: len(json.dumps(v)))
        t = s.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), "null")
        if t == "string":
            if "maxLength" not in s:
                raise ValueError("string without maxLength")
            return fill_text(int(s["maxLength"]), filler)
        if t in ("integer", "number"):
            return s.get("maximum", s.get("minimum", 0))
        if t == "boolean":
            return False
        if t == "null":
            return None
        if t == "array":
            if "maxItems" not in s:
                raise ValueError("array without maxItems")
            return [build(s["items"], j, stack) for j in range(int(s["maxItems"]))]
        props = s.get("properties")
        if not props:
            raise ValueError("object open to any keys")
        return {k: build(v, i, stack) for k, v in props.items()}

    return build(schema, 0, ())


# -- the engines' own tokenizers ------------------------------------------------------------------
class ServerTokenizer:
    """`POST /tokenize` on an OpenAI-compatible server's root: llama.cpp takes `content`, vLLM takes
    `prompt` (and also reports `max_model_len`). Counts are cached; `available()` probes once."""

    def __init__(self, base_url: str, *, model: str | None = None, api_key: str | None = None, timeout_s: float = 10.0):
        root = base_url.rstrip("/")
        self.url = (root[: -len("/v1")] if root.endswith("/v1") else root) + "/tokenize"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._cache: dict[str, int] = {}
        self._ok: bool | None = None
        self.max_model_len: int | None = None

    def _post(self, text: str) -> dict[str, Any]:
        body = {"content": text, "prompt": text, "add_special": False, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        # Bounded in total, not per read: a server that drips its answer cannot hold a job's preflight.
        data = wire.get_json_blocking(
            self.url, api_key=self.api_key, timeout_s=self.timeout_s, method="POST", body=body
        )
        if not isinstance(data, dict):
            raise ValueError(f"{self.url} did not answer a JSON object")
        return data

    def available(self) -> bool:
        if self._ok is None:
            try:
                data = self._post("{}")
                self._ok = isinstance(data.get("tokens"), list) or isinstance(data.get("count"), int)
                if isinstance(data.get("max_model_len"), int):
                    self.max_model_len = data["max_model_len"]
            except wire.GET_ERRORS:
                self._ok = False
        return self._ok

    def __call__(self, text: str) -> int:
        if text not in self._cache:
            try:
                data = self._post(text)
                n = data.get("count")
                self._cache[text] = int(n) if isinstance(n, int) else len(data["tokens"])
            except (*wire.GET_ERRORS, KeyError, TypeError) as exc:
                raise TransportError(
                    f"tokenizer at {shown_url(self.url)} stopped answering ({exc}); is the server still up?"
                ) from exc
        return self._cache[text]


def tokenizer_for(backend: Any) -> "ServerTokenizer | None":
    """The engine's own tokenizer when its server answers `/tokenize`, else None (use `byte_counter`).
    One probe per backend object."""
    if not hasattr(backend, "base_url"):
        return None
    cached = _TOKENIZERS.get(id(backend))
    if cached is not None and cached[0] is backend:
        return cached[1]
    key_env = getattr(backend, "api_key_env", None)
    tok = ServerTokenizer(
        backend.base_url,
        model=getattr(backend, "default_model", None),
        api_key=os.environ.get(key_env) if key_env else None,
    )
    result = tok if tok.available() else None
    _TOKENIZERS[id(backend)] = (backend, result)
    return result


_TOKENIZERS: dict[int, tuple[Any, "ServerTokenizer | None"]] = {}


# -- the open registry of structured roles --------------------------------------------------------
@dataclass(frozen=True)
class StageBudget:
    """A stage setting that replaces the role's `max_tokens` for one call (e.g.
    `simulation.scenario_max_tokens`). `explicit` is False when the value is the setting's default."""

    value: int | None
    setting: str
    explicit: bool


@dataclass(frozen=True)
class RoleSchema:
    """One structured output a role produces.

    `schema()` builds the JSON schema actually sent; `stages` names the commands that make this call;
    `budget(recipe)` returns a `StageBudget` when a stage setting overrides the role's `max_tokens`,
    else None; `active(recipe)` is False when the recipe switches the call off (e.g. `validation.arc`)."""

    role: str
    name: str
    schema: Callable[[], dict[str, Any]]
    stages: frozenset[str]
    budget: Callable[[Any], StageBudget | None] | None = None
    active: Callable[[Any], bool] | None = None
    # When the schema depends on the recipe (the judge's rubric and issue cap), this builds it instead.
    schema_for: Callable[[Any], dict[str, Any]] | None = None

    def schema_of(self, recipe: Any) -> dict[str, Any]:
        return self.schema_for(recipe) if self.schema_for is not None else self.schema()


_REGISTRY: dict[tuple[str, str], RoleSchema] = {}


def register_role_schema(entry: RoleSchema) -> RoleSchema:
    """Declare a structured output of a role; stages call this at import (re-registering replaces).
    The checker then covers it without importing the stage."""
    _REGISTRY[(entry.role, entry.name)] = entry
    return entry


def registered(stages: set[str] | None = None) -> list[RoleSchema]:
    """Registered outputs, optionally only those made by one of `stages`."""
    from mindsimkit.mindcore.stages import load_stages

    load_stages()
    return [e for e in _REGISTRY.values() if stages is None or e.stages & set(stages)]


PromptEstimator = Callable[[Any, "Sizer"], "PromptSize | None"]


@dataclass
class PromptSize:
    """A role's largest prompt (estimated) and what it is made of, in tokens."""

    role: str
    tokens: int
    parts: dict[str, int] = field(default_factory=dict)
    note: str = ""


class Sizer:
    """Counts prompt text for size estimates: with the engine's tokenizer when given, else at
    `FALLBACK_CHARS_PER_TOKEN` characters per token (an average for English under BPE, not a bound —
    prompt sizes are estimates, unlike output budgets). Text the model will write but has not yet is
    stood in for by `fill_text`; text bounded in tokens (a reply's `max_tokens`) is added as is."""

    FALLBACK_CHARS_PER_TOKEN = 4.0

    def __init__(self, counter: TokenCounter | None = None):
        self.counter = counter

    @property
    def exact(self) -> bool:
        return self.counter is not None

    def __call__(self, text: str) -> int:
        if self.counter is not None:
            return self.counter(text)
        return math.ceil(len(text) / self.FALLBACK_CHARS_PER_TOKEN)

    def text_of_tokens(self, tokens: int) -> str:
        """Filler text about `tokens` tokens long (used to render a bounded reply into a prompt)."""
        per = max(1.0, len(FILLER) / max(1, self(FILLER)))
        return fill_text(int(tokens * per))


_PROMPTS: dict[str, PromptEstimator] = {}


def register_prompt_estimate(role: str, estimator: PromptEstimator) -> None:
    """Declare how to estimate `role`'s largest prompt (for the context check before a run)."""
    _PROMPTS[role] = estimator


def prompt_estimator(role: str) -> PromptEstimator | None:
    from mindsimkit.mindcore.config import role_base
    from mindsimkit.mindcore.stages import load_stages

    load_stages()
    return _PROMPTS.get(role) or _PROMPTS.get(role_base(role))


# Chat-template tokens around each message (ChatML: "<|im_start|>role\n" … "<|im_end|>\n"); an estimate.
MESSAGE_OVERHEAD = 6


def messages_tokens(messages: list[dict[str, Any]], sz: Callable[[str], int]) -> int:
    """Tokens of a chat request's messages, each with its template overhead (for prompt estimates)."""
    return sum(sz(str(m.get("content") or "")) + MESSAGE_OVERHEAD for m in messages)
