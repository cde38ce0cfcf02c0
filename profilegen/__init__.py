"""Profile generation for MindSim (MindEval2 paper §4.1 and Appendix C "Profiles", "Presenting
problems", "Formulation vocabularies", "Screening and selection"; PatientAct §3.2 for the causal
chain, hard-conflict checks and validate-and-revise loop).

Stages, each usable alone: personas → clinical anchors → 5P formulation → screen → select.
The stored row is `profilegen.schemas.Profile`; `profilegen.dataset.load_profiles` reads a dataset.
"""

__all__ = ["Profile", "load_profiles"]


def __getattr__(name: str):
    # Lazy so `import profilegen` stays cheap (no pyarrow import until a dataset is read).
    if name == "Profile":
        from profilegen.schemas import Profile

        return Profile
    if name == "load_profiles":
        from profilegen.dataset import load_profiles

        return load_profiles
    raise AttributeError(name)
