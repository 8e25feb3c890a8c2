"""`python -m perfgate` runs the CLI."""

import sys

from perfgate.cli import main

sys.exit(main())
