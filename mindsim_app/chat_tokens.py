"""How long export rows are for a trainer: each row rendered through the shipped ChatML training template and
counted with the embedded model's own tokenizer (SmolLM2-135M-Instruct, read from the GGUF file the toolkit
ships). Trainers truncate rows past their `max_length` (TRL's default is 1,024 tokens), so the export summary
gives the longest row and the 95th percentile.

The tokenizer is built from the GGUF's vocabulary and merges with `tokenizers` (no torch, no download): a
byte-level BPE split the way llama.cpp splits for the file's pre-tokenizer type. The template is rendered with
jinja2 set up as transformers sets it up for chat templates (sandboxed, `trim_blocks`, `lstrip_blocks`, its
`tojson`, `{% generation %}` marking the assistant's tokens), so a count here is the length of
`tokenizer.apply_chat_template(messages, tools=..., chat_template=TEMPLATE)` (tests/mindsim_app/test_export_trl.py
checks both, and the ids against the embedded llama.cpp server's own `/tokenize`).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

TEMPLATE_NAME = "chatml_generation.jinja2"
# Lengths a trainer is commonly run at: the summary counts rows longer than each.
LENGTHS = (1024, 2048, 4096, 8192)
# llama.cpp's `tokenizer.ggml.pre` values whose split we know: SmolLM's is GPT-2's with every digit on its own.
_DIGITS_APART = {"smollm"}
_CONTROL = 3  # llama.cpp's token type of special tokens (`<|im_start|>`, `<|im_end|>`, ...)


def template_path() -> Path:
    """The shipped ChatML template with generation markers (also for models whose own template has none)."""
    return Path(str(resources.files("mindsimkit.mindsim_app") / "data" / TEMPLATE_NAME))


def template_text() -> str:
    return template_path().read_text(encoding="utf-8")


# GGUF metadata value types (llama.cpp's gguf.h): fixed-size scalars by struct format; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf_metadata(path: Path, prefix: str = "tokenizer.") -> dict[str, Any]:
    """The metadata of a GGUF file whose keys start with `prefix`, read straight from its header. `gguf.GGUFReader`
    maps every array element of every field on open: 35 s for this 94 MB file on a loaded 2-core machine, against
    well under a second here."""
    import mmap
    import struct

    from mindsimkit.mindcore.errors import InputError

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise InputError(f"{path}: not a GGUF file")
        version, _tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version < 2:
            raise InputError(f"{path}: GGUF version {version} is too old to read")
        pos = 24

        def string() -> str:
            nonlocal pos
            (n,) = struct.unpack_from("<Q", buf, pos)
            pos += 8 + n
            return buf[pos - n : pos].decode("utf-8", errors="replace")

        def value(kind: int) -> Any:
            nonlocal pos
            if kind == 8:
                return string()
            if kind == 9:
                item, n = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                if item in _SCALARS:
                    fmt = f"<{n}{_SCALARS[item]}"
                    out = list(struct.unpack_from(fmt, buf, pos))
                    pos += struct.calcsize(fmt)
                    return out
                return [value(item) for _ in range(n)]
            fmt = "<" + _SCALARS[kind]
            (out,) = struct.unpack_from(fmt, buf, pos)
            pos += struct.calcsize(fmt)
            return out

        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = string()
            (kind,) = struct.unpack_from("<I", buf, pos)
            pos += 4
            v = value(kind)
            if key.startswith(prefix):
                meta[key] = v
        return meta


@lru_cache(maxsize=4)
def gguf_tokenizer(path: Path | None = None) -> Any:
    """A `tokenizers.Tokenizer` for the GGUF file at `path` (default: the shipped SmolLM2 model)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from mindsimkit.mindcore.embedded import default_model_path
    from mindsimkit.mindcore.errors import InputError

    path = Path(path or default_model_path())
    meta = read_gguf_metadata(path)
    kind, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
    if kind != "gpt2":
        raise InputError(f"{path}: tokenizer type {kind!r}; token counts read byte-level BPE (gpt2) vocabularies only")
    tokens, kinds = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type") or []
    bpe = models.BPE(
        vocab={t: i for i, t in enumerate(tokens)},
        merges=[tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]],
    )
    tok = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if pre in _DIGITS_APART
        else byte_level
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, kinds) if k == _CONTROL]
    )
    return tok


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # transformers' own `tojson` for chat templates: plain json.dumps, no HTML escaping (jinja2's escapes <, >, &).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=4)
def _compiled(source: str) -> Any:
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}…{% endgeneration %}` rendered as its body: the markers only matter for masks."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def render(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = False,
    template: str | None = None,
) -> str:
    """`messages` (and `tools`) as the template writes them for the model."""
    text: str = _compiled(template or template_text()).render(
        messages=messages, tools=tools or None, add_generation_prompt=add_generation_prompt
    )
    return text


def count(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Tokens of one conversation rendered through the shipped template (special tokens counted whole)."""
    return len(gguf_tokenizer().encode(render(messages, tools), add_special_tokens=False).ids)


def lengths_summary(counts: Iterable[int]) -> dict[str, Any]:
    """Longest, 95th percentile (nearest rank) and mean row length, and how many rows each common `max_length`
    would truncate."""
    xs = sorted(counts)
    if not xs:
        return {}
    p95 = xs[max(0, math.ceil(0.95 * len(xs)) - 1)]
    return {
        "tokenizer": "SmolLM2-135M-Instruct (the shipped GGUF)",
        "template": TEMPLATE_NAME,
        "rows": len(xs),
        "max": xs[-1],
        "p95": p95,
        "mean": round(sum(xs) / len(xs), 1),
        "rows_longer_than": {str(n): sum(x > n for x in xs) for n in LENGTHS},
    }


def lengths_line(summary: dict[str, Any]) -> str:
    """One line for the terminal: what `max_length` keeps every row whole."""
    over = summary["rows_longer_than"]["1024"]
    return (
        f"rows are {summary['max']} tokens at most (p95 {summary['p95']}, SmolLM2 tokenizer, shipped template): "
        f"set the trainer's max_length to at least {summary['max']}"
        + (f"; TRL's default 1024 would truncate {over} of {summary['rows']}" if over else "")
    )
