"""How the operator starts a board session: the launcher interface and its local-process kind.

The operator never runs a session itself; it asks a launcher to start `benchfarm session run
NS/NAME` somewhere and from then on only watches the run's status and the session's Lease. The
embedded lab's launcher starts a local process in its own process group and session, so killing
the operator (even with SIGKILL) kills no session. In a cluster, `kube.jobs` starts each session as
a Kubernetes Job instead (BENCHFARM_LAUNCHER=job).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """One session attempt (resume 0) or resume of a run: what any launcher needs to start it."""
    namespace: str
    name: str
    uid: str
    attempt: int
    resume: int
    deadline_s: float = 3600.0          # what is left of the run's timeout
    reads: tuple[str, ...] = ()         # other runs of its namespace it reads (its baseline)


class Launcher(Protocol):
    def launch(self, req: Launch) -> str:
        """Start a runner for the run; returns a handle for logs and events."""

    def reap(self) -> None:
        """Collect finished runners (no zombies); called from the operator's loop."""


class ProcessLauncher:
    """A runner as a local process, detached from the operator, logging to a file per attempt."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None,
                 command: list[str] | None = None, pid_dir: Path | None = None) -> None:
        self.log_dir = log_dir
        self.pid_dir = pid_dir       # the embedded lab stops sessions by these on `lab down`
        self.env = env
        self.command = command or [sys.executable, "-m", "benchfarm.cli", "session", "run"]
        self.children: dict[int, subprocess.Popen] = {}

    def launch(self, req: Launch) -> str:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        logfile = self.log_dir / (f"{req.namespace}.{req.name}.attempt-{req.attempt}"
                                  f".run-{req.resume}.log")
        env = {**os.environ, **(self.env or {}), "BENCHFARM_RUN_UID": req.uid}
        with logfile.open("ab") as out:
            proc = subprocess.Popen([*self.command, f"{req.namespace}/{req.name}"], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        self.children[proc.pid] = proc
        if self.pid_dir is not None:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            (self.pid_dir / f"session-{proc.pid}.pid").write_text(str(proc.pid))
        log.info("launched the session of %s/%s (attempt %d, run %d): pid %d, log %s",
                 req.namespace, req.name, req.attempt, req.resume, proc.pid, logfile)
        return f"pid {proc.pid}, log {logfile}"

    def reap(self) -> None:
        for pid, proc in list(self.children.items()):
            if proc.poll() is not None:
                del self.children[pid]
                if self.pid_dir is not None:
                    (self.pid_dir / f"session-{pid}.pid").unlink(missing_ok=True)


def from_env(kube: object = None) -> Launcher:
    kind = os.environ.get("BENCHFARM_LAUNCHER", "process")
    if kind == "job":
        from .jobs import JobLauncher
        return JobLauncher.from_env(kube)
    if kind != "process":
        raise SystemExit(f"BENCHFARM_LAUNCHER={kind!r}: 'process' or 'job'")
    state = Path(os.environ.get("BENCHFARM_STATE", "/tmp/benchfarm"))
    pids = os.environ.get("BENCHFARM_SESSION_PIDS")
    return ProcessLauncher(Path(os.environ.get("BENCHFARM_SESSION_LOGS",
                                               state / "logs" / "sessions")),
                           pid_dir=Path(pids) if pids else None)
