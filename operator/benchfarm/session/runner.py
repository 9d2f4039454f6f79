"""`benchfarm session run NS/NAME`: one board session as its own process, resumable at any step.

The operator schedules a run (status: Running, board, attempt) and launches this; from then on the
runner owns the board. It proves it is alive with a Lease of its run, acquires the place under the
run's own labgrid identity, and runs the session's steps (core.steps). Every finished step goes to
the spool and MinIO (store.spool) before the next one starts, so a runner that is killed and
launched again resumes at the first unfinished step: it power-cycles the board, whose state is
unknown, and never redoes a finished step. Results and reports are built from the checkpoints.

Who is to blame decides what happens (errors.py): an outage of the API server, MinIO or the labgrid
coordinator is waited out, bounded by the run's timeout; a board fault ends the session with
`status.sessionEnd` so the operator can charge the board and move the run; a place someone else
took is left alone. Before every power operation the runner checks it still holds its Lease and
the place; a runner whose Lease was taken over stops touching the board at once.

Here the process: the checks that the run is this session's, the parts it builds, the run's Lease
around the session, and the upload of the spool on every exit. The board's work is
`session.onboard`, the wait for a seat on standby `session.standby`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from kubernetes.client.rest import ApiException

from benchfarm.api.outcomes import Phase, Reason, Refusal, RunFailure, attempt_of
from benchfarm.api.places import HandedPlace, run_identity
from benchfarm.api.runs import BenchmarkRunSpec, BenchmarkRunStatus, SuiteSpec
from benchfarm.core.conditions import seconds_of
from benchfarm.core.policy import trust
from benchfarm.errors import RunError
from benchfarm.kubeapi.client import API_FAILURES, Kube
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.session import Cancelled
from benchfarm.logs import configure
from benchfarm.session.context import Config, RunContext
from benchfarm.session.lifeline import Fenced, Lifeline, api_version_of
from benchfarm.session.onboard import OnBoard
from benchfarm.session.parsing import start_forkserver
from benchfarm.session.standby import Standby
from benchfarm.session.status import StatusWriter
from benchfarm.settings import Settings
from benchfarm.store.artifacts import ArtifactStore, StoreConfig
from benchfarm.store.spool import Spool

log = logging.getLogger("benchfarm.session")

TERM_DRAIN_SECONDS = 20.0   # a session told to stop (its pod is going away) uploads this long


class Runner:
    """One run's session as a process: it reads the run, proves it is this session's to run (the
    board, the uid), builds its parts (the labgrid client, the Lease, the status writer, the
    standby, the board's work) and runs the session under the run's Lease; every exit uploads what
    the spool holds."""

    def __init__(self, namespace: str, name: str, config: Config) -> None:
        self.namespace, self.name, self.config = namespace, name, config
        self.kube = Kube(config.settings, outage_budget=3600.0)
        self.identity = f"{socket.gethostname()}/{os.getpid()}"
        self.terminating = threading.Event()
        # the run's Lease, once the run proved this session's (`run`): `terminate` fences it
        self.lifeline: Lifeline | None = None

    # -- entry ------------------------------------------------------------------------------------
    def run(self) -> int:
        body = self.kube.get_run(self.namespace, self.name)
        if body is None:
            log.info("run %s/%s does not exist; nothing to do", self.namespace, self.name)
            return 0
        raw = body.get("status") or {}
        status = BenchmarkRunStatus.of(raw)
        expected_uid = self.config.settings.run_uid
        if expected_uid and body["metadata"]["uid"] != expected_uid:
            log.info("run %s/%s was re-created (uid differs); nothing to do", self.namespace,
                     self.name)
            return 0
        if status.phase != Phase.running or not status.board:
            log.info("run %s/%s is %s, not running on a board; nothing to do", self.namespace,
                     self.name, status.phase)
            return 0
        board = self.config.settings.run_board
        if board != status.board:   # the operator named the board at launch, not the status
            log.info("run %s/%s: launched for board %r, its status names %r; a stale session, "
                     "nothing to do", self.namespace, self.name, board, status.board)
            return 0
        uid = body["metadata"]["uid"]
        attempt = attempt_of(raw)
        host, user = run_identity(uid)
        handed = HandedPlace.from_setting(self.config.settings.run_place)
        # the place the operator handed over: the session's labgrid client knows only it (no
        # sync of the whole lab); without it, the client reads every place like any other
        coordinator = Coordinator.from_settings(
            self.config.settings, address=self.config.coordinator, host=host, user=user,
            place=handed if handed and handed.name == board else None)
        coordinator.connect_soon()     # the connection overlaps the Lease and set-up
        lifeline = self.lifeline = Lifeline(
            self.kube, self.namespace, self.name, uid, self.identity, api_version_of(body),
            lease_seconds=self.config.lease_seconds, renew_seconds=self.config.renew_seconds)
        started = status.startTime
        start_wall = seconds_of(started) if started else time.time()
        spec = BenchmarkRunSpec(**body["spec"])
        lifeline.deadline = time.monotonic() + (start_wall + spec.timeoutSeconds -
                                                time.time())
        self.kube.outage_budget = max(10.0, lifeline.deadline - time.monotonic())
        writer = StatusWriter(self.kube, lifeline, body)
        standby = Standby(self.config, self.kube, coordinator, lifeline, attempt)
        work = OnBoard(self.config, self.kube, coordinator, lifeline, standby)
        lifeline.on_run = lambda run: standby.note_go_ahead(uid, run)
        standby.note_go_ahead(uid, body)
        lifeline.on_tick = writer.flush
        lifeline.on_wait = lambda text: writer.progress(text, "Waiting", force=True)
        lifeline.on_stop = work.stop_board
        try:
            return self._leased(body, spec, writer, work)
        finally:
            coordinator.close()

    def terminate(self) -> None:
        """SIGTERM (the pod or the process is going away): stop touching the board, upload
        what the spool holds for a short while, and say what could not be uploaded."""
        log.warning("%s/%s: told to stop; the board is left to the resumed session",
                    self.namespace, self.name)
        self.terminating.set()
        if self.lifeline is not None:
            self.lifeline.fence()

    def _leased(self, body: dict[str, Any], spec: BenchmarkRunSpec, writer: StatusWriter,
                work: OnBoard) -> int:
        try:
            took = work.lifeline.take()
        except ApiException as exc:   # the run's namespace is going away with the run
            if exc.status == 403 and "being terminated" in str(exc.body or ""):
                log.info("run %s/%s: its namespace is being deleted; nothing to do",
                         self.namespace, self.name)
                return 0
            raise
        if not took:
            log.warning("another runner holds the lease of %s/%s; exiting", self.namespace,
                        self.name)
            return 3
        log.info("%s/%s: session %s holds the run's Lease", self.namespace, self.name,
                 self.identity)
        work.lifeline.start()
        try:
            self._session(body, spec, writer, work)
            return 0
        except Fenced:
            log.warning("%s/%s: this session was fenced (its Lease taken over, or told to "
                        "stop); it no longer touches the board", self.namespace, self.name)
            return 4
        finally:
            work.lifeline.release()

    # -- the session ------------------------------------------------------------------------------
    def _session(self, body: dict[str, Any], spec: BenchmarkRunSpec, writer: StatusWriter,
                 work: OnBoard) -> None:
        threading.Thread(target=_prewarm, name="prewarm", daemon=True).start()
        threading.Thread(target=_start_parsing, name="parse-server", daemon=True).start()
        raw = body.get("status") or {}
        status = BenchmarkRunStatus.of(raw)
        meta = body["metadata"]
        store = ArtifactStore(StoreConfig.from_settings(self.config.settings))
        spool = Spool(self.config.spool / meta["uid"], store)
        spool.start()
        ctx = RunContext(
            namespace=self.namespace, name=self.name, uid=meta["uid"], spec=spec, suites=[],
            place=status.board or "", attempt=attempt_of(raw, 1),
            resume=int(status.resumes or 0), deadline=work.lifeline.deadline,
            prefix=store.run_prefix(self.namespace, self.name, meta["uid"], spec.artifactPrefix),
            config=self.config, kube=self.kube, lifeline=work.lifeline, status=writer,
            spool=spool, labels=dict(meta.get("labels") or {}))
        try:
            ctx.suites = self._admitted_suites(ctx, status)
            if status.boardReleased:
                work.results_only(ctx, "its board was released before")
            else:
                work.on_board(ctx, started=bool(status.startTime))
        except RunError as exc:   # what the status says was not what the operator admitted
            ctx.status.finish(Phase.failed, exc.reason, exc.message)
        except Cancelled:   # while waiting for a service, or the run was deleted
            if not work.lifeline.deleting.is_set():
                ctx.status.finish(Phase.cancelled, Reason.cancelled, "cancelled by spec.cancel")
        finally:
            self._drain(ctx)
            spool.stop()

    @staticmethod
    def _admitted_suites(ctx: RunContext, status: BenchmarkRunStatus) -> list[SuiteSpec]:
        """The suites the operator resolved at admission, proven by its signature: a tenant
        who could write the run's status still cannot change what runs on the board."""
        try:
            key = trust.key_from(ctx.config.settings.signing_key)
        except ValueError as exc:
            raise RunError(f"the lab has no signing key for sessions ({exc}); an operator "
                           f"misconfiguration", reason=RunFailure.signing_key_missing) from exc
        suites = status.resolvedSuites
        if not trust.verify(key, ctx.uid, suites, status.resolvedSuitesSignature):
            raise RunError("the suites in the run's status are not the ones the operator "
                           "admitted (their signature does not match); nothing was run",
                           reason=Refusal.statusTampered)
        return [SuiteSpec(**s) for s in suites or []]

    def _drain(self, ctx: RunContext) -> None:
        """Every exit path uploads what the spool holds (bounded by the run's timeout, or
        briefly when told to stop) and says what it could not."""
        spool = ctx.spool
        if not spool.pending():
            return
        bound = time.monotonic() + TERM_DRAIN_SECONDS if self.terminating.is_set() else \
            max(ctx.deadline, time.monotonic() + TERM_DRAIN_SECONDS)
        if spool.drain(bound):
            return
        left = [str(p.relative_to(spool.root)) for p in spool.pending()]
        message = (f"{len(left)} artifact(s) could not be uploaded ({spool.last_error}): "
                   f"{', '.join(left[:10])}{' …' if len(left) > 10 else ''}")[:1000]
        log.error("%s/%s: %s", ctx.namespace, ctx.name, message)
        try:
            ctx.status.event("Warning", "ArtifactsNotUploaded", message)
        except API_FAILURES:   # the API server may be down too; the log says it
            log.debug("could not post the event", exc_info=True)


def _prewarm() -> None:
    """Load what only the end of a session needs (statistics, plotting: about a second) while the
    board boots, so the run's results follow its last step without that delay."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401

        from benchfarm.session import results  # noqa: F401  (scipy through the regression rule)
    except Exception:  # only a head start; the real import reports any problem
        log.debug("prewarm failed", exc_info=True)


def _start_parsing() -> None:
    """Start the parses' forkserver while the board boots (`session.parsing`)."""
    try:
        start_forkserver()
    except Exception:  # only a head start: the first parse starts it and reports a problem
        log.debug("the parses' forkserver did not start ahead", exc_info=True)




def _process_age() -> float:
    """Seconds since this process started (for the log: what Python and the imports took)."""
    try:
        ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        uptime = float(open("/proc/uptime").read().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def main(ref: str) -> int:
    settings = Settings.from_env()
    configure(settings.log_level)
    log.info("session of %s: started %.2f s after its process (Python and imports)", ref,
             _process_age())
    namespace, _, name = ref.partition("/")
    if not name:
        print("benchfarm session run: expected NAMESPACE/NAME", flush=True)
        return 2
    runner = Runner(namespace, name, Config.from_settings(settings))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: runner.terminate())
    return runner.run()
