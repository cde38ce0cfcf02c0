"""The papers' baseline patient simulators as patient engines (MindEval2/MindSim §4.3, App. E "Baselines";
PatientAct §4.2): Patient-Psi (`patient_psi`) and the MindEval patient (`mindeval`). Each is one module and
one registration, listed in `mindsim/data/patient_engines.yaml`; docs/baselines.md says what each reproduces."""
