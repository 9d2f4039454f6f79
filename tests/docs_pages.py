"""What the tests read of the documentation: the commands of the tutorials, the reference
generator (docs/_ext/benchfarm_reference.py), the README's links."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
TUTORIALS = ["first-run", "first-lease", "first-campaign", "first-ab"]

_FENCE = re.compile(r"^(```+)\s*console\s*$")
_HEREDOC = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")


def tutorial_commands(page: str) -> list[str]:
    """The commands of a tutorial's ```console blocks: each line after a `$ ` prompt (with the
    lines of a here-document it opens, up to its terminator, and the lines a trailing backslash
    continues it onto); the other lines of a block are output."""
    lines = (DOCS / "tutorials" / f"{page}.md").read_text().splitlines()
    commands: list[str] = []
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if fence is None:
            m = _FENCE.match(line)
            fence = m.group(1) if m else None
            i += 1
            continue
        if line.startswith(fence) and not line.strip().strip("`"):
            fence = None
            i += 1
            continue
        if line.startswith("$ "):
            cmd = [line[2:]]
            while cmd[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            heredoc = _HEREDOC.search(cmd[-1])
            if heredoc:
                while i + 1 < len(lines):
                    i += 1
                    cmd.append(lines[i])
                    if lines[i].strip() == heredoc.group(1):
                        break
            commands.append("\n".join(cmd))
        i += 1
    return commands


def tutorial_script(page: str) -> str:
    """The tutorial as one bash script that stops at the first failing command, echoing each."""
    body = []
    for cmd in tutorial_commands(page):
        first = cmd.splitlines()[0]
        body.append(f"echo {_quote('$ ' + first)}")
        body.append(cmd)
    return "set -euo pipefail\n" + "\n".join(body) + "\n"


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def reference() -> ModuleType:
    """docs/_ext/benchfarm_reference.py, the generator of the reference pages."""
    ext = str(DOCS / "_ext")
    if ext not in sys.path:
        sys.path.insert(0, ext)
    import benchfarm_reference
    return benchfarm_reference
