"""MHQR judging (MindEval2 §3, Appendix A, Appendix G): score every counsellor reply of any simulator's
sessions against a clinical-issue rubric, rank counsellors, and measure the judge against clinicians.
Imports only `mindcore`, like `validation/`."""

# What other packages may import from this one (tests/test_layers.py holds the code to it). Other packages use
# `run.run_judging`, `config.JudgeConfig`, `ablation` (the memory ablation's scores and report), `schemas` (rows
# and summaries), `rubric`, `scores`, `stats`, `inputs`, `judging`, `patientact`, `patientact_profiles` (Table 1),
# `patientact_report` (writing scored sessions), `sample`, `units` and `cli.app`; `rubrics` (the rubric registry), `ratings` (the long format), `alpha`
# (Krippendorff's α) and `scales` (the judge of any scales rubric), which the annotation tool builds on; `costs`
# (prices and what usage costs at them), by which `mindsim plan` prices every role as the judge's table does.
PUBLIC_MODULES = (
    "ablation",
    "agreement",
    "alpha",
    "cli",
    "config",
    "costs",
    "inputs",
    "judging",
    "patientact",
    "patientact_profiles",
    "patientact_report",
    "ratings",
    "rubric",
    "rubrics",
    "run",
    "scales",
    "sample",
    "schemas",
    "scores",
    "stats",
    "units",
    "stage",
)
