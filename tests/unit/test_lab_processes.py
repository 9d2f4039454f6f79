"""The embedded lab's processes: a PID file names one process, never a later one with its PID."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchfarm.cpu import group_nice
from benchfarm_devlab import processes
from tests.unit.privileges import may_raise_priorities


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


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroup here")
def test_the_component_that_goes_first_gets_a_cpu_before_the_rest_and_only_it(state):
    """The operator's session group (it starts one of its own) at FIRST_NICE where the lab may
    raise priorities, the other components' left at 0; without the privilege the lab says so and
    starts it all the same."""
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    processes.start_process("first", sleep, ports=[], ready=lambda: True,
                            nice=processes.FIRST_NICE)
    processes.start_process("other", sleep, ports=[], ready=lambda: True)
    try:
        first, other = processes.running_pid("first"), processes.running_pid("other")
        assert first is not None and other is not None
        assert os.getsid(first) == first and os.getsid(other) == other
        privileged = may_raise_priorities()
        assert group_nice(first) == (processes.FIRST_NICE if privileged else 0)
        # pytest's own group, if it is in one (not where it runs in the host's first session)
        assert group_nice(other) == 0 and group_nice(os.getpid()) != processes.FIRST_NICE
    finally:
        processes.stop_process("first")
        processes.stop_process("other")
