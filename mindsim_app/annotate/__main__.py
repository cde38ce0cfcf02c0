"""`python -m mindsim_app.annotate …`: the annotate commands on their own (the same as `mindsim annotate …`)."""

import sys

from mindsimkit.mindsim_app.annotate.cli import app

if __name__ == "__main__":
    sys.exit(app(prog_name="mindsim annotate"))
