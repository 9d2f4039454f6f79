"""The command line, `benchfarm`: one entry point (`main`) and one module per group of commands."""

from benchfarm.cli.entry import main

__all__ = ["main"]
