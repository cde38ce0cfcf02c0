"""Profile generation for MindSim (MindEval2 paper §4.1 and Appendix C "Profiles", "Presenting
problems", "Formulation vocabularies", "Screening and selection"; PatientAct §3.2 for the causal
chain, hard-conflict checks and validate-and-revise loop).

Stages, each usable alone: personas → clinical anchors → 5P formulation → screen → select.
The stored row is `profilegen.schemas.Profile`; `profilegen.dataset.load_profiles` reads a dataset.
"""

from typing import Any

# What other packages may import from this one (tests/test_layers.py holds the code to it). Other packages use
# `schemas.Profile`, `dataset.load_profiles`, `pipeline.run_profiles`, `config`, the vocabularies in `moves`,
# the psychological formulation in `psych`, `render` and `cli.app`, the formulation vocabularies in `vocab` (the
# baseline engines render coping labels with their descriptions); `testing` holds hand-built profiles for
# other stages' tests.
PUBLIC_MODULES = (
    "cli",
    "config",
    "dataset",
    "formulation",  # `draft_model`: PatientAct's decomposition budget reads the writer schema's list limits
    "moves",
    "patientact_inputs",  # the typed reader of `mindsim import patientact-situations`'s folder
    "pipeline",
    "psych",
    "render",
    "schemas",
    "situation_schemas",  # a situation-seeded profile's record, read by PatientAct's decomposition
    "situation_stage",  # the calls per situation `mindsim plan` counts; the brief PatientAct decomposition reads
    "stage",
    "testing",
    "vocab",
)

__all__ = ["Profile", "load_profiles"]


def __getattr__(name: str) -> Any:
    # Lazy so `import profilegen` stays cheap (no pyarrow import until a dataset is read).
    if name == "Profile":
        from mindsimkit.profilegen.schemas import Profile

        return Profile
    if name == "load_profiles":
        from mindsimkit.profilegen.dataset import load_profiles

        return load_profiles
    raise AttributeError(name)
