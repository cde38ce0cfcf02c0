"""PatientAct: a second patient engine with trust-gated disclosure and a reaction → behaviour → resistance
pipeline (Sabour et al., PatientAct, §3.3), plugged into MindSim's sessions, schedule, scenarios and memory.

Modules: `data` (taxonomies, trust rules, priors as data files), `seed` (psychological seed: attachment style
and core-belief theme), `decompose` (psychological formulation via `profilegen.psych`, then profile → static
layer + one typed item per remaining profile piece, §3.2/§3.3.1), `retrieval` (lexical tag matching and the trust gate, §3.3.2), `matcher` (the LLM tag matcher role),
`trust` (bounded stepped updates, §3.3.4, and carrying trust across sessions, ours), `participant` (the
per-turn patient), `session` (its system prompts), `engine` (the `PatientEngine` registered as `patientact`,
and its ablation arms as variants `patientact:no_tg` / `no_dm` / `no_pipe`, §4 Table 4), `budgets` (preflight entries), `recall` (both matchers'
recall and precision on the held-out set). The rubrics and the tables' statistics live in `judge.patientact`
and `judge.patientact_profiles` (`mindsim judge run --rubric patientact`, `mindsim patientact profile-eval`).
docs/patientact.md maps each to the paper.
"""

# The name the engine is registered under (`mindsim/data/patient_engines.yaml`).
NAME = "patientact"
