"""The multi-session patient simulator (MindEval2/MindSim §4.2, Appendix D; PatientAct §3.3 as a second
patient engine): schedules, scenarios, prompting, memory, agenda, the move guard, the patient engines, the
session loop and the runners that simulate a pool. The command line, job, cards, publishing and exports
that compose it with the other stages live in `mindsim_app`."""

# What other packages may import from this one (tests/test_layers.py holds the code to it). The app builds on
# `config` (SimulationConfig), `simulate` (run_simulation), `records` (SessionRecord), `summary`,
# `patient_engines` (the registry), `patientact` (its engine's data and rubric inputs) and `presets` (which preset
# is about which engine: the inspect tasks keep a recipe's presets of the engine they play).
PUBLIC_MODULES = (
    "agenda",
    "arc",
    "config",
    "memory",
    "patient",
    "patient_engines",
    "patientact",
    "presets",
    "prompting",
    "records",
    "reference",
    "scenario",
    "schedule",
    "session",
    "simulate",
    "stage",
    "summary",
)
