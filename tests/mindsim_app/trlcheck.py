"""What a trainer does with an export, without torch: load it with `datasets`, render each row through
transformers' `apply_chat_template` with the shipped ChatML template and the embedded model's tokenizer (the
vocabulary and merges read from the shipped GGUF), and read the assistant mask TRL's `assistant_only_loss` uses.
Shared by the fake-run tests and the embedded study-run test (tests/mindsim_app/test_export_trl.py)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from mindsimkit.mindsim_app import chat_tokens

HEADER = "<|im_start|>assistant\n"


def load(path: Path, cache: Path) -> Any:
    """The export as a trainer loads it (a private cache: `datasets` keys its cache on file names)."""
    from datasets import load_dataset

    return load_dataset(
        "json" if path.suffix == ".jsonl" else "parquet", data_files=str(path), split="train", cache_dir=str(cache)
    )


@lru_cache(maxsize=1)
def tokenizer() -> Any:
    """transformers' fast tokenizer over the GGUF's vocabulary, with the shipped template. (transformers' own
    GGUF loader needs torch; its chat-template and mask code does not.)"""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=chat_tokens.gguf_tokenizer(),
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        chat_template=chat_tokens.template_text(),
    )


def assistant_spans(ids: list[int], mask: list[int]) -> list[str]:
    """The text of each run of masked tokens."""
    spans, run = [], []
    for i, m in zip(ids, mask, strict=True):
        if m:
            run.append(i)
        elif run:
            spans.append(run)
            run = []
    if run:
        spans.append(run)
    return [tokenizer().decode(s) for s in spans]


def expected_span(message: dict[str, Any]) -> str:
    """What the model writes for one assistant message: its words (and tool calls) and the end token."""
    text = chat_tokens.render([message])
    assert text.startswith(HEADER) and text.endswith("\n"), text
    return text[len(HEADER) : -1]


def check_row(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Render one conversation as TRL does; the mask must cover exactly the assistant messages, each whole, and
    the rendering and its length must be what the export counted. Returns the token count."""
    tok = tokenizer()
    out = tok.apply_chat_template(
        messages, tools=tools or None, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    want = [expected_span(m) for m in messages if m["role"] == "assistant"]
    got = assistant_spans(ids, mask)
    # A learner message that starts with whitespace may share its first token with the header's newline.
    assert [g.lstrip() for g in got] == [w.lstrip() for w in want], (got, want)
    text = tok.apply_chat_template(messages, tools=tools or None, tokenize=False)
    assert text == chat_tokens.render(messages, tools)
    assert len(ids) == chat_tokens.count(messages, tools)
    return len(ids)


def check_preference(row: dict[str, Any]) -> None:
    """TRL's DPO tokenizes the prompt with a generation prompt and then prompt + reply: the first must be a
    prefix of the second for both replies, or the trainer cuts the prompt where they diverge."""
    tok = tokenizer()
    prompt = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=True)["input_ids"]
    for side in ("chosen", "rejected"):
        full = tok.apply_chat_template(row["prompt"] + row[side], return_dict=True)["input_ids"]
        assert list(full[: len(prompt)]) == list(prompt), side
        assert len(full) > len(prompt)
