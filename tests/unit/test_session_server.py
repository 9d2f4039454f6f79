"""The session server forks sessions that belong to nobody, and the process launcher hands it runs
once it is ready (a cold process before that)."""

from __future__ import annotations

import os
import sys
import time

from benchfarm.operator.launch.launchers import Launch, ProcessLauncher, _alive
from benchfarm.session import runner, server


def wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.05)


def test_a_forked_session_runs_in_its_own_session_with_its_log_and_env(tmp_path, monkeypatch):
    def fake_main(ref: str) -> int:     # what runs in the fork: the real runner needs a cluster
        print(f"{ref} uid={os.environ['BENCHFARM_RUN_UID']} pid={os.getpid()} "
              f"sid={os.getsid(0)} parent={os.getppid()} group={os.getpgid(0)}", flush=True)
        return 0
    monkeypatch.setattr(runner, "main", fake_main)
    log = tmp_path / "team-a.r1.attempt-1.run-0.log"
    pid = server.fork_session({"argv": ["run", "team-a/r1"], "log": str(log),
                               "env": {"BENCHFARM_RUN_UID": "u-1"}})
    wait_gone(pid)
    text = log.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("team-a/r1 "))
    fields = dict(f.split("=") for f in line.split()[1:])
    assert fields["uid"] == "u-1" and int(fields["pid"]) == pid
    assert int(fields["sid"]) not in (os.getsid(0), os.getpid())   # not our session
    assert int(fields["parent"]) != os.getpid()                    # nor our child
    assert int(fields["group"]) == pid             # its group's leader: `end` kills the group
    assert "BENCHFARM_RUN_UID" not in os.environ or os.environ["BENCHFARM_RUN_UID"] != "u-1"


def req(name: str) -> Launch:
    return Launch(namespace="team-a", name=name, uid=f"uid-{name}", attempt=1, resume=0)


def test_the_launcher_starts_cold_until_its_server_is_ready_then_forks(tmp_path):
    pids = tmp_path / "pids"
    launcher = ProcessLauncher(tmp_path / "logs", pid_dir=pids, environ=os.environ,
                               env={"KUBECONFIG": str(tmp_path / "none")})
    try:
        launcher.top_up()
        srv = launcher.server
        assert srv is not None and (pids / f"session-{srv.pid}.pid").exists()
        cold = launcher.launch(req("early"))          # the server is still importing
        assert launcher.forked == set() and cold.startswith("pid ")
        deadline = time.monotonic() + 60
        server_log = tmp_path / "logs" / "session-server.log"
        while "ready in" not in (server_log.read_text() if server_log.exists() else ""):
            assert time.monotonic() < deadline, "the session server never got ready"
            time.sleep(0.1)
        handle = launcher.launch(req("warm"))
        pid = int(handle.split()[1])
        assert launcher.forked == {pid} and (pids / f"session-{pid}.pid").exists()
        assert launcher.server is srv                 # the same server serves the next run
        wait_gone(pid)
        assert handle == f"pid {pid}"                  # no host path: it goes to an event
        log = (tmp_path / "logs" / "team-a.warm.attempt-1.run-0.log").read_text()
        assert f"session process {pid} forked by the session server {srv.pid}" in log
        assert "Invalid kube-config file" in log      # the real runner ran, and found no cluster
        launcher.reap()
        assert launcher.forked == set() and not (pids / f"session-{pid}.pid").exists()
        assert srv.poll() is None                     # the server outlives its sessions
    finally:
        if launcher.server is not None:
            launcher.server.kill()
            launcher.server.wait()
        for proc in launcher.children.values():
            proc.wait(timeout=30)


def _in_a_child(code: str) -> list[int]:
    """Run `code` in a fresh Python with this one's import path; the integers it printed."""
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout
    return [int(word) for word in out.split()]


def test_the_server_does_once_what_every_session_would_redo():
    """Before its first fork the server has frozen what it imported (a session's collections
    skip it) and compiled the report's template."""
    code = """
import gc
from benchfarm.session import server
from benchfarm.settings import Settings
server._import_everything(Settings.from_env())
from benchfarm.report.html import template
print(gc.get_freeze_count(), template.cache_info().currsize)
"""
    frozen, templates = _in_a_child(code)
    assert frozen > 100_000 and templates == 1


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)      # a session spinning in C: SIGTERM does nothing
child = os.fork()
if child == 0:                                      # its parse's child, in the same group
    time.sleep(600)
    os._exit(0)
open(sys.argv[1] + "." + sys.argv[-1].split("/")[-1], "w").write(str(child))   # argv: run NS/NAME
time.sleep(600)
"""


def test_ending_a_session_kills_its_whole_process_group_even_if_it_ignores_sigterm(tmp_path):
    pids = tmp_path / "pids"
    child_file = tmp_path / "child.stalled"
    launcher = ProcessLauncher(tmp_path / "logs", pid_dir=pids, server=False, environ=os.environ,
                               command=[sys.executable, "-c", STUBBORN, str(tmp_path / "child")])
    launcher.TERM_GRACE = 0.5
    session = int(launcher.launch(req("stalled")).split()[1])
    other = int(launcher.launch(req("other")).split()[1])
    try:
        deadline = time.monotonic() + 30
        while not child_file.exists() or not child_file.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        grandchild = int(child_file.read_text())
        assert (pids / f"session-{session}.run").read_text().split()[0] == "uid-stalled"
        restarted = ProcessLauncher(tmp_path / "logs", pid_dir=pids, server=False,
                                    environ=os.environ)
        restarted.TERM_GRACE = 0.5        # an operator that did not launch it finds it too
        what = restarted.end(req("stalled"))
        assert str(session) in what and "killed after SIGTERM" in what
        launcher.reap()
        wait_gone(session, 5)
        wait_gone(grandchild, 5)
        assert _alive(other)                              # another run's session is left alone
        assert not (pids / f"session-{session}.run").exists()
        assert restarted.end(req("stalled")) == "no session process was running"
    finally:
        for pid in (session, other):
            try:
                os.killpg(pid, 9)
            except ProcessLookupError:
                pass
        launcher.reap()
