"""Realism validation of simulated patients (MindEval2/MindSim paper, §4.3 and Appendix E).

Reads stored transcripts or text-free reference statistics only; it never calls a simulator, so it
can audit any simulator's output. Imports nothing of ours but `mindcore` (for the arc labeller's LLM
calls and shared I/O helpers).

Main entry points:
- `validation.compare.compare(reference_artifact, sims, out_dir, config, engines=None)`
- `validation.reference.build_reference(...)` / `load_reference(...)`
- `validation.cli.app` (mounted as `mindsim validate …`)
"""

# What other packages may import from this one (tests/test_layers.py holds the code to it). Other packages use
# `compare.compare`, `config.ValidationConfig`, `reference`, `transcripts`, `features`, `arc` and `cli.app`.
PUBLIC_MODULES = (
    "arc",
    "cli",
    "compare",
    "config",
    "features",
    "reference",
    "transcripts",
    "stage",
)
