"""The embedded lab's processes: a PID file names one process, never a later one with its PID."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchfarm_devlab import processes


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(processes, "STATE", tmp_path)
    return tmp_path


def test_a_pid_file_names_the_process_that_started_then_and_no_other(state):
    processes.start_process("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"],
                            ports=[], ready=lambda: True)
    pid = processes.running_pid("sleeper")
    assert pid is not None and (state / "pids" / "sleeper.started").read_text().strip()
    started = (state / "pids" / "sleeper.started").read_text()
    # the same PID with another start time: a reused PID, the component is not running
    (state / "pids" / "sleeper.started").write_text(str(int(started) + 1))
    assert processes.running_pid("sleeper") is None
    assert not processes.stop_process("sleeper")          # and its group is not signalled
    assert processes._alive(pid)
    (state / "pids" / "sleeper.pid").write_text(str(pid))
    (state / "pids" / "sleeper.started").write_text(started)
    assert processes.running_pid("sleeper") == pid
    assert processes.stop_process("sleeper")
    assert processes.running_pid("sleeper") is None
    assert not list((state / "pids").iterdir())


def test_a_pid_file_without_a_start_time_is_trusted_as_before(state):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    try:
        (state / "pids").mkdir()
        (state / "pids" / "session-x.pid").write_text(str(proc.pid))    # as the launcher writes
        assert processes.running_pid("session-x") == proc.pid
    finally:
        proc.kill()
        proc.wait()
