"""Native tool calls on a server whose chat endpoint does not constrain them: the embedded llama.cpp with SmolLM2.

Its chat endpoint parses `<tool_call>` blocks once a tools-capable template is installed, but it does not force one
when `tool_choice` asks for it: the 135M model answered `required` with prose every time it was tried
(docs/engines.md). So for a request that offers tools, the embedded backend does what a tool-calling server does
inside itself: it renders the conversation, tools and earlier calls included, with a Hermes-style ChatML template
(`data/tools_chatml.jinja2`), asks the raw completion endpoint for the continuation, and parses the `<tool_call>`
blocks back into OpenAI `tool_calls`. Where a call is required (`required`, or one named function) the answer is
opened with the block's tag and held to a JSON schema of `{"name", "arguments"}` over the offered tools; under
`auto` the model writes freely, and if it opens a block, that block is asked again under the same schema from the
tag on (the lazy grammar llama.cpp's own tool-call path uses).

A block that does not parse is never dropped: `parse_calls` reports it, and the client re-asks as for any bad call.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2

from mindsimkit.mindcore.prompts import ENV_OPTIONS
from mindsimkit.mindcore.sandbox import PromptSandbox, render_bounded

TEMPLATE_NAME = "tools_chatml.jinja2"
OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
# What the answer is opened with where a call is required: the model continues with the JSON object.
CALL_PREFIX = OPEN_TAG + "\n"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)(?:" + re.escape(CLOSE_TAG) + r"|$)", re.S)


def _tojson(value: Any) -> str:
    # Not jinja2's own filter, which escapes <, > and & for HTML: the model must see the schema as JSON.
    return json.dumps(value, ensure_ascii=False)


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = PromptSandbox(**ENV_OPTIONS)
    env.filters["tojson"] = _tojson
    source = (resources.files("mindsimkit.mindcore") / "data" / TEMPLATE_NAME).read_text(encoding="utf-8")
    return env.from_string(source)


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The whole prompt for `messages` offering `tools` (OpenAI function definitions), ending where the
    assistant's next turn begins."""
    return render_bounded(_template(), {"messages": messages, "tools": tools or [], "add_generation_prompt": True})


def tool_name(tool: dict[str, Any]) -> str:
    return str((tool.get("function") or tool).get("name", ""))


def forced_name(tool_choice: Any, tools: list[dict[str, Any]]) -> str | None:
    """Which call `tool_choice` forces: "" for any of `tools` (`required`), a name for one named function, None
    where the model may answer in words (`auto`, `none`, absent)."""
    if tool_choice == "required":
        return ""
    if isinstance(tool_choice, dict):
        name = str((tool_choice.get("function") or {}).get("name") or "")
        if name not in {tool_name(t) for t in tools}:
            raise ValueError(f"tool_choice names '{name}', which is not among the offered tools")
        return name
    return None


def call_schema(tools: list[dict[str, Any]], only: str = "") -> dict[str, Any]:
    """The JSON schema of one block's object: `{"name": <a tool>, "arguments": <its parameters>}`, over every
    offered tool or only the one named. Definitions the parameters refer to are moved to the root, where the
    references resolve from. Arguments that do not say whether other keys may follow get none: a grammar that
    allows any key let the 135M model add made-up keys until it ran out of budget (the preflight's one-word
    probe, at the patient's temperature 1.0 and frequency penalty, cut off at 64 tokens)."""
    options: list[dict[str, Any]] = []
    defs: dict[str, Any] = {}
    for tool in tools:
        if only and tool_name(tool) != only:
            continue
        params = dict((tool.get("function") or tool).get("parameters") or {"type": "object"})
        defs.update(params.pop("$defs", {}))
        if params.get("type") == "object":
            params.setdefault("additionalProperties", False)
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool_name(tool)}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    return {**schema, "$defs": defs} if defs else schema


@dataclass
class ParsedReply:
    """A completion read back: the words outside the blocks, the calls in OpenAI's shape, and what was wrong with
    any block that did not parse ('' when all did)."""

    content: str | None
    calls: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def parse_calls(text: str, tools: list[dict[str, Any]]) -> ParsedReply:
    """Read `text` (the assistant's turn as the model wrote it) into words and `<tool_call>` blocks. Each block
    must hold one JSON object naming an offered tool, with its arguments as an object; the arguments go out as a
    JSON string with a fresh call id, as OpenAI's servers send them."""
    offered = {tool_name(t) for t in tools}
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for match in _BLOCK.finditer(text):
        body = match.group(1).strip()
        if not match.group(0).endswith(CLOSE_TAG):
            errors.append(f"a {OPEN_TAG} block was never closed (cut off at the output budget?)")
            continue
        try:
            data = json.loads(body)
        except ValueError as exc:
            errors.append(f"a {OPEN_TAG} block is not JSON ({exc})")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            errors.append(f"a {OPEN_TAG} block is not an object with a 'name'")
            continue
        args = data.get("arguments", {})
        if isinstance(args, str):  # a model that writes the arguments as a string of JSON, as the wire carries them
            try:
                args = json.loads(args)
            except ValueError:
                errors.append(f"the arguments of '{data['name']}' are not a JSON object")
                continue
        if data["name"] not in offered:
            errors.append(f"'{data['name']}' is not one of the offered tools ({', '.join(sorted(offered))})")
            continue
        if not isinstance(args, dict):
            errors.append(f"the arguments of '{data['name']}' are not a JSON object")
            continue
        calls.append(
            {
                "id": "call_" + secrets.token_hex(12),
                "type": "function",
                "function": {"name": data["name"], "arguments": json.dumps(args, ensure_ascii=False)},
            }
        )
    words = _BLOCK.sub("", text).strip()
    return ParsedReply(content=words or None, calls=calls, error="; ".join(errors))


def split_at_call(text: str) -> tuple[str, bool]:
    """The words a free answer wrote before its first `<tool_call>` tag, and whether it opened one."""
    head, tag, _ = text.partition(OPEN_TAG)
    return head, bool(tag)
