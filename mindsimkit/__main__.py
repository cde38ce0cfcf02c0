"""`python -m mindsimkit` is the `mindsim` command."""

import sys

from mindsimkit.mindsim_app.cli import main

sys.exit(main())
