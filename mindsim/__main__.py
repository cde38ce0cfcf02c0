"""`python -m mindsim` is the same as the `mindsim` command."""

import sys

from mindsim.cli import main

sys.exit(main())
