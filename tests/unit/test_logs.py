"""The log format is set up in one place (`benchfarm.logs.configure`): the operator, a board
session and the dashboard log the same lines, a command its warnings under its own name, and no
other module of the package or the dev lab configures logging."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from benchfarm import logs

ROOT = Path(__file__).resolve().parents[2]


def _stderr(configure: str) -> str:
    """What a fresh process logs after `configure(...)` (a program's start: no handler yet)."""
    script = (f"import logging\nfrom benchfarm import logs\nlogs.configure({configure})\n"
              "logging.getLogger('benchfarm.session').debug('a detail')\n"
              "logging.getLogger('benchfarm.session').info('session of ns/run: started')\n"
              "logging.getLogger('benchfarm.history.index').warning('skipped x')\n"
              "logging.getLogger('kubernetes.client.rest').info('response body: ...')\n")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=60).stderr


def test_a_program_logs_time_level_logger_and_message():
    lines = _stderr("'INFO'").splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert len(lines) == 2, lines      # no DEBUG, nothing of the Kubernetes client below WARNING
    assert re.fullmatch(f"{stamp} INFO benchfarm.session: session of ns/run: started", lines[0])
    assert re.fullmatch(f"{stamp} WARNING benchfarm.history.index: skipped x", lines[1])


def test_a_command_says_its_name():
    assert _stderr("30, command='results reindex'") == "benchfarm results reindex: skipped x\n"


def test_no_module_but_benchfarm_logs_configures_logging():
    found = []
    for path in [*(ROOT / "operator" / "benchfarm").rglob("*.py"),
                 *(ROOT / "devlab" / "benchfarm_devlab").rglob("*.py")]:
        if path == Path(logs.__file__).resolve():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("basicConfig", "Formatter"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"logging configured outside benchfarm.logs: {found}"
