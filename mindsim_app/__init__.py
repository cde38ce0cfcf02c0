"""The application layer of the toolkit: everything that composes the stages into commands a user runs.

It holds the `mindsim` console script and its per-stage commands, the end-to-end job, preflight, engine
checks, dataset cards, publishing and post-training exports. The stage packages (`profilegen`, `mindsim`,
`validation`, `judge`) never import it; it imports them. docs/architecture.md draws the layers.
"""

# What other packages may import from this one (tests/test_layers.py holds the code to it). Nothing of ours
# imports the app; `cli.main` is the console script.
PUBLIC_MODULES = (
    "cli",
    "job",
    "cards",
    "publish",
    "exports",
    "release",
    "report",
    "annotate",
    "patientact_eval",
    "simulate_cli",
)
