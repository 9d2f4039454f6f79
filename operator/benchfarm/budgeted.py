"""A call in a child process with a CPU and memory budget: what runs on a tenant's output or
figures (a step's parse, a run's reports, the dashboard's pages) cannot stall the process that
asked for it.

A parser or a renderer reads what a tenant's board printed or what its run measured. One that
runs away on it (a pattern that backtracks, an axis whose loop stands still) holds the GIL of
whatever process runs it: in a board session its Lease went unrenewed, and the operator took it
for dead; on the dashboard's event loop every user's page waited. So such work runs in a child
forked from a forkserver (a process of one thread that imported the callers' modules once:
forking a process that has threads could copy a lock one of them holds), with RLIMIT_CPU and
RLIMIT_AS set before the call starts. The caller waits on a pipe with the GIL free, and stops the
wait (killing the child) when `stopped` says so, or when a wall-clock bound far beyond the CPU
budget passes (a child the host starves of CPU).

One forkserver serves a process and every process it forks: the session server starts it before
it forks a session (`share`), so a session's first parse does not start a forkserver of its own
(importing the parsers and the reports again, a second or more of CPU each: with a thousand
boards, more than the host's CPUs). multiprocessing checks that a forkserver lives with
`waitpid`, which only its parent may call; a process forked below that parent checks the pid
instead (`_ensure_running`).

Past the budget `call` raises `OverBudget`; each caller says whose fault that is in its own
terms (`session.parsing`: ParseOverBudget, `session.reporting`: ReportOverBudget, the
dashboard: an error page). Only what the child returns comes back, so a caller returns only
what it needs (a parse at most its metric cap).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import resource
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from benchfarm.settings import adopt

log = logging.getLogger(__name__)

T = TypeVar("T")

WALL_FACTOR = 4.0        # the wall-clock bound: this many times the CPU budget, plus WALL_SLACK
WALL_SLACK = 30.0        # seconds: a forkserver's first start, a host busy with other sessions
POLL_SECONDS = 0.5       # how often the wait looks at `stopped`


@dataclass(frozen=True)
class Budget:
    """What one call may take: CPU seconds (rounded up to whole seconds: RLIMIT_CPU's unit) and
    address space in MiB; `wall_seconds` follows from the CPU budget unless given."""

    cpu_seconds: float
    memory_mib: int
    wall_seconds: float | None = None

    @property
    def wall(self) -> float:
        return self.wall_seconds if self.wall_seconds is not None else \
            self.cpu_seconds * WALL_FACTOR + WALL_SLACK


class OverBudget(Exception):
    """The call took more than its budget; `what` says which part, in words a message can quote
    after the name of the work ("took more than the 30 CPU seconds it may take")."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class Abandoned(Exception):
    """`stopped` said so during the call: the child was killed and nothing came back."""


class Failed(Exception):
    """The called function raised (a bug of benchfarm's: a caller returns its expected failures
    as values); the child logged its traceback, `detail` is its type and message."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])     # a zombie has ended


def _ensure_running() -> None:
    """multiprocessing's `ForkServer.ensure_running`, callable from a process forked below the
    forkserver's parent too (a session of the session server): there it `waitpid`s a process
    that is not its child and fails, so a forkserver that is not ours counts as alive while its
    pid is, and as gone (ours started instead) once it ended."""
    server: Any = forkserver._forkserver     # its state is private: held by tests.unit
    pid = server._forkserver_pid
    if pid is not None and (parent := _parent_of(pid)) != os.getpid():
        # its socket lives in the parent's temporary folder, removed when the parent exits
        # (the session server, once the operator went away): then it is no longer ours to use
        if parent is not None and os.path.exists(server._forkserver_address):
            resource_tracker.ensure_running()
            return
        _forget()
    _ENSURE_RUNNING()


def _forget() -> None:
    """Leave a parent's forkserver: the next call starts this process's own."""
    server: Any = forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    # the temporary folder a new forkserver's socket goes in was the parent's, and went with it
    config: Any = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    if (folder := config.get("tempdir")) and not os.path.isdir(folder):
        del config["tempdir"]


def _start(child: Any) -> None:
    """`child.start()`; once more with a forkserver of this process's own when a parent's went
    away between its check and the connection to it."""
    try:
        child.start()
    except (FileNotFoundError, ConnectionRefusedError):
        pid = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
        if pid is None or _parent_of(pid) == os.getpid():
            raise
        _forget()
        child.start()


_ENSURE_RUNNING = forkserver._forkserver.ensure_running
forkserver._forkserver.ensure_running = _ensure_running  # type: ignore[method-assign]


def _context(preload: Sequence[str]) -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))   # the first start decides; later ones change nothing
    return ctx


def start(preload: Sequence[str]) -> None:
    """Start this process's forkserver ahead of the first call, importing `preload` once (the
    modules of the functions it will run and the process's main module, which a child of a
    forkserver imports as `__mp_main__`): each call's child then starts in tens of ms. In a
    process forked after its parent started one (`share`), that one is used."""
    _context(preload)
    _ensure_running()


def share(preload: Sequence[str]) -> None:
    """Start the forkserver in a process that forks others (the session server, before its first
    fork), for them to use: `start`. Its children are then the forkserver's, not the forked
    process's: a call's child outlives a killed caller by at most its CPU budget."""
    start(preload)


def _child(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...],
           budget: Budget) -> None:
    """In the child: the limits first, then the call; one message back."""
    # one thread for numpy's BLAS, loaded by the call if at all: a thread pool the size of the
    # host (stacks and buffers reserved for each) would count against RLIMIT_AS on a big node
    adopt({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    cpu = max(1, math.ceil(budget.cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))    # SIGXCPU, then SIGKILL
    memory = budget.memory_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        conn.send(("ok", fn(*args)))
    except MemoryError:
        conn.send(("memory",))
    except Exception as exc:        # a bug: its traceback in the caller's log (this child's)
        log.exception("%s failed in its budgeted child", getattr(fn, "__name__", fn))
        conn.send(("bug", f"{type(exc).__name__}: {str(exc)[:300]}"))
    finally:
        conn.close()


def call(fn: Callable[..., T], *args: Any, budget: Budget, preload: Sequence[str],
         stopped: Callable[[], bool] = lambda: False, name: str = "") -> T:
    """`fn(*args)` in a child within `budget`: what it returns (it and `args` are pickled:
    `fn` a module-level function). Raises OverBudget past the budget, Abandoned when `stopped`
    turned true meanwhile, Failed when `fn` raised. `preload`: what the forkserver imports when
    this call starts it (see `start`)."""
    ctx = _context(preload)
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, name=name or getattr(fn, "__name__", "call"),
                        daemon=True, args=(send, fn, args, budget))
    started = time.monotonic()
    _start(child)
    send.close()
    try:
        message = _wait(receive, child, started, budget, stopped)
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(5.0)
    log.debug("%s took %.2f s in its child", child.name, time.monotonic() - started)
    if message is None:
        if child.exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
            raise OverBudget(f"took more than the {budget.cpu_seconds:g} CPU seconds it may take")
        raise Failed(f"its process ended with {child.exitcode} and no answer")
    if message[0] == "ok":
        result: T = message[1]
        return result
    if message[0] == "memory":
        raise OverBudget(f"needed more than the {budget.memory_mib} MiB it may take")
    raise Failed(message[1])


def _wait(receive: Connection, child: Any, started: float, budget: Budget,
          stopped: Callable[[], bool]) -> tuple[Any, ...] | None:
    """The child's message; None when it ended without one (killed by its CPU limit)."""
    while True:
        if receive.poll(POLL_SECONDS):
            try:
                message: tuple[Any, ...] = receive.recv()
                return message
            except EOFError:          # it died before it could answer
                child.join(5.0)
                return None
        if stopped():
            raise Abandoned(f"{child.name} was abandoned: its caller stopped")
        if time.monotonic() - started > budget.wall:
            raise OverBudget(f"ran for more than {budget.wall:g} s")
        if not child.is_alive() and not receive.poll(0):
            child.join(5.0)
            return None
