"""A command that prints far more than memory holds, on a real shell through labgrid's drivers.

The board is a real /bin/sh on a pty served over TCP (ptyboard.py: a console at loopback speed,
the virtual boards' 150 KB/s would take hours for this); the command runs in another process
(bigoutput.py) through labgrid's NetworkSerialPort, SerialDriver and ShellDriver with
benchfarm's strategy streaming the console to a serial log file, and `run_bounded` holding the
output. That process's peak RSS must not grow with the output. BENCHFARM_BIG_OUTPUT sets the
size (64 MiB by default, for `make test`; 1 GiB was run by hand, see the commit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchfarm.lab.board import OUTPUT_LIMIT

pytestmark = pytest.mark.stack
HERE = Path(__file__).resolve().parents[1] / "stack"   # ptyboard.py, bigoutput.py
MiB = 1024 * 1024


def test_a_huge_output_keeps_memory_bounded_and_says_what_was_cut(tmp_path, attempt):
    size = int(os.environ.get("BENCHFARM_BIG_OUTPUT", 64 * MiB))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    board = subprocess.Popen([sys.executable, str(HERE / "ptyboard.py")], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        port = board.stdout.readline().strip()
        log = tmp_path / "serial.log"
        res = subprocess.run([sys.executable, str(HERE / "bigoutput.py"), port, str(size),
                              str(log)], capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        got = json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        board.kill()
        board.wait()
    print(f"{size / MiB:.0f} MiB in {got['seconds']} s; peak RSS {got['before'] / MiB:.0f} -> "
          f"{got['after'] / MiB:.0f} MiB")
    grown = got["after"] - got["before"]
    attempt(f"a suite prints {size / MiB:.0f} MiB to the console",
            f"kept head+tail ({got['chars'] // MiB} MiB), serial log whole; RSS +{grown / MiB:.0f} MiB",
            lost=got["log"] <= size or grown >= 6 * OUTPUT_LIMIT)
    assert got["exit"] == 0
    assert got["first"] == "FIRST-LINE" and got["last"] == "LAST-LINE"
    assert len(got["cut"]) == 1 and got["cut"][0].endswith(
        "bytes cut from the middle of this output; the serial log has them all]")
    cut = int(got["cut"][0].split()[1])
    assert cut > size - OUTPUT_LIMIT            # the pty's CRLFs make the output a bit longer
    assert got["chars"] < OUTPUT_LIMIT + 1000
    assert got["log"] > size                    # the serial log has every byte
    assert log.stat().st_size == got["log"]
    assert got["after"] - got["before"] < 6 * OUTPUT_LIMIT, got   # not the output's size
