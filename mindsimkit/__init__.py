"""mindsimkit: clinically grounded synthetic patients, multi-session simulation and realism audits for
mental-health AI.

The one import namespace of the toolkit. Its packages are the repository's top-level folders, mapped in by
setup.py: `mindsimkit.mindcore` (engines, run files), `mindsimkit.profilegen`, `mindsimkit.mindsim` (the
simulator), `mindsimkit.validation`, `mindsimkit.judge`, `mindsimkit.mindsim_app` (command line, job, cards,
report), and the data packages `mindsimkit.prompts`, `mindsimkit.cards`, `mindsimkit.recipes`. The command is
`mindsim` (or `python -m mindsimkit`).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mindsimkit")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
