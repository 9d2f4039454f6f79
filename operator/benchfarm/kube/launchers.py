"""How the operator starts a board session: the launcher interface and its local-process kind.

The operator never runs a session itself; it asks a launcher to start `benchfarm session run
NS/NAME` somewhere and from then on only watches the run's status and the session's Lease. The
embedded lab's launcher starts a local process in its own process group and session, so killing
the operator (even with SIGKILL) kills no session. In a cluster, `kube.jobs` starts each session as
a Kubernetes Job instead (BENCHFARM_LAUNCHER=job).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
    """A runner as a local process, detached from the operator, logging to a file per attempt.

    A cold Python process spends about 2.5 s importing labgrid, kubernetes, minio and pydantic
    before it can acquire its board, so `spares` processes are kept started ahead of need
    (`benchfarm session spare`): imported, waiting on stdin for the run to serve. A launch hands
    the request to a spare (and starts the next spare) or, when none is ready, starts a cold one.
    A spare whose operator dies reads end-of-file and exits; a launched session never reads stdin
    again, so it outlives the operator as a cold one does.
    """

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None,
                 command: list[str] | None = None, pid_dir: Path | None = None,
                 spares: int = 2) -> None:
        self.log_dir = log_dir
        self.pid_dir = pid_dir       # the embedded lab stops sessions by these on `lab down`
        self.env = env
        self.command = command or [sys.executable, "-m", "benchfarm.cli", "session"]
        self.children: dict[int, subprocess.Popen] = {}
        self.spares = spares
        self.ready: list[subprocess.Popen] = []     # spares waiting for a run, oldest first

    def launch(self, req: Launch) -> str:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        logfile = self.log_dir / (f"{req.namespace}.{req.name}.attempt-{req.attempt}"
                                  f".run-{req.resume}.log")
        ref = f"{req.namespace}/{req.name}"
        proc = self._hand_to_spare(ref, req.uid, logfile)
        how = "a spare"
        if proc is None:
            how = "a cold process"
            env = {**os.environ, **(self.env or {}), "BENCHFARM_RUN_UID": req.uid}
            with logfile.open("ab") as out:
                proc = self._start([*self.command, "run", ref], out, env, stdin=subprocess.DEVNULL)
        self.top_up()
        log.info("launched the session of %s (attempt %d, run %d) in %s: pid %d, log %s",
                 ref, req.attempt, req.resume, how, proc.pid, logfile)
        return f"pid {proc.pid}, log {logfile}"

    def _hand_to_spare(self, ref: str, uid: str, logfile: Path) -> subprocess.Popen | None:
        while self.ready:
            proc = self.ready.pop(0)
            if proc.poll() is not None or proc.stdin is None:
                continue
            request = {"run": ref, "log": str(logfile), "env": {"BENCHFARM_RUN_UID": uid}}
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.close()
                return proc
            except OSError:                  # it died meanwhile: try the next one
                continue
        return None

    def top_up(self) -> None:
        """Start spares until `spares` wait (called after each launch and by `reap`)."""
        self.ready = [p for p in self.ready if p.poll() is None]
        while len(self.ready) < self.spares:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, **(self.env or {})}
            with (self.log_dir / "spares.log").open("ab") as out:
                self.ready.append(self._start([*self.command, "spare"], out, env,
                                              stdin=subprocess.PIPE))

    def _start(self, argv: list[str], out: Any, env: dict[str, str], *, stdin: int) \
            -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=stdin, env=env,
                                start_new_session=True)
        self.children[proc.pid] = proc
        if self.pid_dir is not None:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            (self.pid_dir / f"session-{proc.pid}.pid").write_text(str(proc.pid))
        return proc

    def reap(self) -> None:
        for pid, proc in list(self.children.items()):
            if proc.poll() is not None:
                del self.children[pid]
                if self.pid_dir is not None:
                    (self.pid_dir / f"session-{pid}.pid").unlink(missing_ok=True)
        if self.spares:
            self.top_up()


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
                           pid_dir=Path(pids) if pids else None,
                           spares=int(os.environ.get("BENCHFARM_SESSION_SPARES", "2")))
