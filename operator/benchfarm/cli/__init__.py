"""The command line, `benchfarm`: one entry point (`main`, in `entry`) and one module per group of
commands, each registering its commands the same way (`add_parsers(sub)` sets `func` on each):

- `programs`: operator, session …, web, settings (what a deployment runs);
- `readback`: report, compare, import-guide, parse (results read back);
- `lease`: lease (a board for a person); `submit`: upload, submit; `export`: export kcidb (a CI
  pipeline's way in and out, over `outcome`, a run's outcome as a CI reads it);
- `check`: check, with --boards the board network's audit (`boardcheck`);
- `results`: history, results … (the results database, scoped by the API server's access review).

A new command goes into its group's `add_parsers`; a new group is a module with `add_parsers`,
named in `entry.GROUPS` and in the cli import contract (pyproject.toml). The docs' CLI reference
is generated from the parser.
"""

from benchfarm.cli.entry import main

__all__ = ["main"]
