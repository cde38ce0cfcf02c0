"""Post-training exports from a finished run (`mindsim export sft|patient|dpo`), in the dataset types TRL
documents; docs/training.md says how to train on them. One module per concern:

- `sft`: supervised rows, the counsellor's (`sft_export`) and the patient simulator's (`patient_export`);
- `dpo`: preference pairs from counterfactual replies to the same history, judged by the MHQR judge;
- `sessions`: the session rows every export reads from `sessions/sessions.parquet`;
- `write`: how rows are typed and written so a trainer takes them as they are, with their side files;
- `cli`: the `mindsim export` commands.

Every export writes its rows (JSONL or parquet, by the output suffix), `FILE.summary.json` (counts, what was cut
or skipped, row lengths in tokens) and `FILE.provenance.jsonl` (per-session or per-pair detail whose shape varies).
"""
