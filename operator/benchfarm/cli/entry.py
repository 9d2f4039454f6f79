"""The `benchfarm` command: the operator, board sessions, the dashboard, parsing, reports and
comparisons.

Other packages add subcommands through the `benchfarm.commands` entry point group (a function
that registers a subparser and sets `func`): the dev lab adds `benchfarm lab …` and `benchfarm
demo` that way, so the operator image, which does not install it, has no lab commands.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchfarm.cli import bisect, check, export, lease, programs, readback, results, submit
from benchfarm.settings import Settings

# One module a group of commands, each with `add_parsers(sub)`: it adds its subcommands and sets
# `func` (args -> exit code) on each, which `main` calls. `benchfarm --help` lists them in this
# order.
GROUPS = (programs, readback, lease, submit, export, check, results, bisect)
# The commands that get no `args.settings`: the programs, which read theirs at their own entry
# (the operator, a session after its fork took its run's variables, the dashboard), `settings`,
# which prints them whatever the environment holds, and the two that read only files. Every other
# command gets the settings `main` read once, and hands on what its parts need.
OWN_SETTINGS = frozenset({"operator", "session", "web", "settings", "parse", "import-guide"})


def _plugins(sub: Any) -> None:
    from importlib.metadata import entry_points
    for ep in entry_points(group="benchfarm.commands"):
        ep.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, plugins included (the docs' CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="benchfarm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for group in GROUPS:
        group.add_parsers(sub)
    _plugins(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("lab", "demo") and argv[0] not in _commands(parser):
        print(f"benchfarm {argv[0]}: the embedded lab is not installed here (it is a developer's "
              "tool: `pip install -e devlab/` in a clone of the repository)", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.cmd not in OWN_SETTINGS:
        args.settings = Settings.from_env()    # SettingError names a variable it cannot use
    return int(args.func(args))


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    """The names of the top-level commands (the plugins' too)."""
    return {name for action in parser._actions
            if isinstance(action, argparse._SubParsersAction) for name in action.choices}
