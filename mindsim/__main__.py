"""`python -m mindsim` is the same as the `mindsim` command.

This file is an executable entry point, never imported by the simulator's modules: it is the one place
under `mindsim/` that names the application package (the command line lives there), so that the
documented `python -m mindsim` keeps working after the simulator and the app were split.
"""

import sys

from mindsimkit.mindsim_app.cli import main

sys.exit(main())
