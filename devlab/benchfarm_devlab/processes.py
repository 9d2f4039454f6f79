"""Lab components as processes: start one unless it runs, wait until it is ready, stop it.

Each component's PID is in `.benchfarm/pids/<name>.pid` and its log in `.benchfarm/logs/`;
`stop_process` kills only the process group a PID file names, so a lab never touches programs it
did not start. Sessions the operator launches use the same PID directory (BENCHFARM_SESSION_PIDS).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from benchfarm_devlab.config import PORT_BASE, PORTS, STATE, LabError, say


def _pidfile(name: str) -> Path:
    return STATE / "pids" / f"{name}.pid"


def _started(pid: int) -> str | None:
    """When the process started (clock ticks since boot, /proc/PID/stat field 22): with the PID,
    what names one process for good; a PID alone is reused once its process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pids_where(argv_matches: Callable[[list[bytes]], bool]) -> list[int]:
    """Processes whose command line (as /proc gives it: NUL-separated bytes) matches: for what
    the lab's own processes start and leave behind without a pid file."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv_matches(argv):
            pids.append(int(proc.name))
    return pids


def running_pid(name: str) -> int | None:
    """The component's PID while the process its PID file names runs. A PID file that also
    names the start time (`<name>.started`) names no process that started at another time: a
    stopped component's PID reused by another program (the operator restarted by a chaos test
    got a killed API server's PID once, and a later stop of the API server took the operator's
    process group with it) is not taken for it."""
    try:
        pid = int(_pidfile(name).read_text())
    except (OSError, ValueError):
        return None
    try:
        started = _pidfile(name).with_suffix(".started").read_text().strip()
    except OSError:
        started = None     # written by another program (a session's, by the launcher)
    if started is not None and _started(pid) != started:
        return None
    return pid if _alive(pid) else None


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_process(name: str, argv: list[str], *, ports: list[int], ready: Callable[[], bool],
                  env: dict[str, str] | None = None, cwd: Path | None = None,
                  timeout: float = 60.0, restart_on_change: bool = False,
                  nice: int = 0) -> None:
    """Start a component unless it already runs; wait until `ready()`; fail with its log.

    With `restart_on_change`, a running component started with other arguments (its command line
    is kept beside its PID file) is restarted with these. With a `nice` below 0 (FIRST_NICE,
    CONTROL_NICE), it gets the CPU before the rest of the lab (`give_priority`)."""
    log = STATE / "logs" / f"{name}.log"
    pid = running_pid(name)
    argv_file = _pidfile(name).with_suffix(".argv")
    if pid is not None and restart_on_change:
        try:
            before = json.loads(argv_file.read_text())
        except (OSError, ValueError):
            before = None
        if before != argv:
            say(f"{name}: running (pid {pid}) with other arguments; restarting")
            stop_process(name)
            pid = None
    if pid is not None:
        if ready():
            return
        say(f"{name}: running (pid {pid}) but not ready; restarting")
        stop_process(name)
    for port in ports:
        deadline = time.monotonic() + 5     # a process just stopped may hold it a moment longer
        while not _port_free(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _port_free(port):
            raise LabError(f"{name}: port {port} on 127.0.0.1 is already taken by another program;"
                           f" stop it or set BENCHFARM_PORT_BASE (now {PORT_BASE}) to another range")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, cwd=cwd,
                                start_new_session=True)
    if nice:
        give_priority(name, proc.pid, nice)
    _pidfile(name).parent.mkdir(parents=True, exist_ok=True)
    _pidfile(name).write_text(str(proc.pid))
    _pidfile(name).with_suffix(".started").write_text(_started(proc.pid) or "")
    argv_file.write_text(json.dumps(argv))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"{name}: exited with code {proc.returncode} while starting; see {log}:\n"
                           + _tail(log))
        if ready():
            return
        time.sleep(0.2)
    raise LabError(f"{name}: not ready after {timeout:.0f} s; see {log}:\n" + _tail(log))


FIRST_NICE = -20     # the CPU priority of the operator: every run and every freed board waits
                     # for its rounds
CONTROL_NICE = -10   # the rest of the lab's control plane (labgrid's coordinator)
# the operator's scheduling thread asks for the lowest real-time priority (`cpu.first_in_line`):
# where the lab may raise priorities it takes a CPU the moment a round is due
OPERATOR_FIRST = {"BENCHFARM_SCHEDULER_RTPRIO": "1"}


def give_priority(name: str, pid: int, nice: int) -> bool:
    """Let a component of the lab's control plane take a CPU before the board sessions of a busy
    lab, as a CPU request does in a cluster and a host of its own does in a lab: the operator
    (its scheduling rounds) and labgrid's coordinator (every seat changes hands through it: a
    relay's release, the heir's acquire). Each component, and each board session, starts a
    session of its own; where the kernel shares the CPU between sessions (autogroup, Debian's
    default outside a cpu cgroup) each session weighs the same, so the operator would weigh as
    much as any one board session out of two dozen. Its group's nice is set to `nice`: that
    needs CAP_SYS_NICE (root has it); without it, or without autogroup, it keeps nice 0 and the
    lab says so. Its children that start sessions of their own (the session server, the board
    sessions) get groups of their own at nice 0.

    The operator goes first of all (FIRST_NICE, -20; the coordinator at -10): a thread of it
    that waits for a CPU with Python's GIL in hand holds up the owner thread's round. It needs
    about a fifth of a CPU, so going first costs the sessions little. Without it a full bench's
    rounds waited up to 84 ms for the GIL such a thread held (the figures: benchmarks/RESULTS.md,
    "The tunings measured with the owner thread")."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
        return True
    except OSError as exc:
        say(f"{name}: keeps the CPU priority of the rest of the lab ({exc.strerror}: "
            f"/proc/{pid}/autogroup); it may wait for a CPU behind the sessions on a busy host")
        return False


def stop_process(name: str, timeout: float = 20.0) -> bool:
    pid = running_pid(name)
    for stale in (_pidfile(name), _pidfile(name).with_suffix(".argv"),
                  _pidfile(name).with_suffix(".started")):
        stale.unlink(missing_ok=True)
    if pid is None:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def http_ok(url: str, token: str | None = None, body: str | None = None) -> bool:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(STATE / "pki" / "ca.crt")) \
        if url.startswith(f"https://127.0.0.1:{PORTS.apiserver}") else ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
            text = resp.read().decode(errors="replace")
            return resp.status == 200 and (body is None or body in text)
    except Exception:
        return False
