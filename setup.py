"""Maps the repository's top-level folders into the toolkit's one import namespace, `mindsimkit` (everything else
is in pyproject.toml). A wheel installs `mindsimkit/` and nothing else at the top of site-packages."""

from setuptools import find_namespace_packages, setup

FOLDERS = ["mindcore", "profilegen", "mindsim", "validation", "judge", "mindsim_app", "prompts", "cards", "recipes"]

# Data folders (mindsim/data/patientact, judge/data/rubrics, …) are found as namespace packages so their files ship.
found = find_namespace_packages(include=[p for f in FOLDERS for p in (f, f"{f}.*")], exclude=["*.__pycache__"])
setup(
    packages=["mindsimkit", *(f"mindsimkit.{p}" for p in found)],
    package_dir={"mindsimkit": "mindsimkit", **{f"mindsimkit.{f}": f for f in FOLDERS}},
)
