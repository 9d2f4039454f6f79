"""How benchfarm logs, set up in one place: each program (the operator, a board session, the
dashboard) and each command that logs calls `configure` once at its entry point.

A program's records carry the time, the level and the logger (what `kubectl logs` and the dev
lab's log files show, and what an operator of the lab greps); a command's warnings are for the
person who ran it and read as its other lines on stderr do, `benchfarm COMMAND: …`. Below the
layers that use it (import-linter), so anything may call it.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(level: int | str = logging.INFO, *, command: str | None = None) -> None:
    """Log to stderr from `level` up, in `FORMAT`, or for a command (`command`, e.g. "results
    reindex") as `benchfarm COMMAND: message`. The Kubernetes client's own records below WARNING
    (every request at DEBUG) stay out."""
    fmt = FORMAT if command is None else f"benchfarm {command}: %(message)s"
    logging.basicConfig(level=level, format=fmt)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
