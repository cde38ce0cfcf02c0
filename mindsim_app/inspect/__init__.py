"""MindEval2 and PatientAct as inspect_ai tasks (optional: `pip install mindsimkit[inspect]`; docs/inspect.md).

One module per piece: `tasks` (the two `@task`s), `harness` (recipe, parameters, patients, engines), `solver` (one
patient's arc with the eval's model as counsellor), `backend` (an inspect model behind the engine layer),
`scorers` (the MHQR judge and PatientAct's rubric with their metrics), `provider` (the `mindsim/ROLE` model
provider: a recipe role as an inspect model), `to_run` (an inspect log as a run folder) and `_registry` (what
inspect's entry point imports). Nothing here is imported unless inspect_ai is installed and asked for.
"""
