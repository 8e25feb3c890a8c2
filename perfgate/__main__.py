"""`python -m perfgate` runs the CLI."""

from perfgate.cli import entry

entry()
