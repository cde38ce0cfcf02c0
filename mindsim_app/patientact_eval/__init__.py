"""PatientAct's evaluation of the profiles a run simulated (PatientAct §4.1, Table 1; App. D.1), one module per
concern:

- `rubric`: one profile and its decomposition judged on the four profile dimensions and the identification task;
- `run`: every decomposed profile of a run judged, the diversity of the set rated, and the table written with the
  human ratings the annotation tool exports;
- `cli`: the `mindsim patientact profile-eval` and `profile-card` commands.

The rubric data, answer schema and statistics are the judge's (`judge/patientact.py`), which audits any
simulator's sessions and so imports nothing from here.
"""
