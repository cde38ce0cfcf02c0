"""Importers of the MindEval authors' released data files (`mindsim import …`).

The files come from SWORDHealth/mind-eval, a repository without a licence: the toolkit never ships them or any of
their code. A user downloads a file and an importer reads it where it lies, checks every record against the
release's documented shape (one `error:` line naming file, record and field on a mismatch; exit 2; nothing
written), and converts it into the files the toolkit's own commands read:

- `profiles`: MindEval2's 50 benchmark members → a profiles folder for `mindsim simulate` (Table 6, patient for
  patient, under `simulation.preset: mindeval2-reference`);
- `realism`: MindEval2's realism study → realism ratings for `mindsim realism report` (Tables 4 and 13) and the
  counsellor labels as MHQR annotations for `mindsim judge agreement`;
- `mindeval_v1`: MindEval v1's clinician ratings → the long rating format for `mindsim judge alpha`.

The name maps between the releases' values and ours are data: `data/mindeval_releases.yaml`.
"""
