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
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.rest import ApiException

from benchfarm import cpu
from benchfarm.api.devicetype import DeviceType
from benchfarm.api.grants import GO_AHEAD_FIELD, Relay
from benchfarm.api.models import BenchmarkRunSpec, LabPolicySpec, SuiteSpec
from benchfarm.api.outcomes import (
    HandBack,
    Phase,
    Reason,
    Refusal,
    RunFailure,
    Underway,
    attempt_of,
)
from benchfarm.api.places import HandedPlace
from benchfarm.core import steps as st
from benchfarm.core.conditions import now_iso
from benchfarm.core.policy import trust
from benchfarm.errors import BoardBusy, InfraError, RunError
from benchfarm.kubeapi.client import API_FAILURES, Kube
from benchfarm.lab.board import SerialLog
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.lab.identities import run_identity
from benchfarm.lab.session import BoardSession, Cancelled
from benchfarm.session import reporting
from benchfarm.session.blame import Settled, Verdict, verdict
from benchfarm.session.context import PEER_TAG, Config, RunContext, iperf3_peer
from benchfarm.session.lifeline import Fenced, Lifeline, api_version_of
from benchfarm.session.parsing import BudgetedParse, start_forkserver
from benchfarm.session.status import StatusWriter
from benchfarm.session.steps import StepRunner
from benchfarm.settings import Settings
from benchfarm.store.artifacts import ArtifactStore, StoreConfig
from benchfarm.store.software import SoftwareCache
from benchfarm.store.spool import Spool

log = logging.getLogger("benchfarm.session")

TERM_DRAIN_SECONDS = 20.0   # a session told to stop (its pod is going away) uploads this long


class Runner:
    def __init__(self, namespace: str, name: str, config: Config) -> None:
        self.namespace, self.name, self.config = namespace, name, config
        self.kube = Kube(outage_budget=3600.0)
        self.identity = f"{socket.gethostname()}/{os.getpid()}"
        self.terminating = threading.Event()
        self.steps: StepRunner | None = None
        self.policy: LabPolicySpec | None = None

    # -- entry --------------------------------------------------------------------------------
    def run(self) -> int:
        body = self.kube.get_run(self.namespace, self.name)
        if body is None:
            log.info("run %s/%s does not exist; nothing to do", self.namespace, self.name)
            return 0
        status = body.get("status") or {}
        expected_uid = self.config.settings.run_uid
        if expected_uid and body["metadata"]["uid"] != expected_uid:
            log.info("run %s/%s was re-created (uid differs); nothing to do", self.namespace,
                     self.name)
            return 0
        if status.get("phase") != Phase.running or not status.get("board"):
            log.info("run %s/%s is %s, not running on a board; nothing to do", self.namespace,
                     self.name, status.get("phase"))
            return 0
        board = self.config.settings.run_board
        if board != status["board"]:   # the operator named the board at launch, not the status
            log.info("run %s/%s: launched for board %r, its status names %r; a stale session, "
                     "nothing to do", self.namespace, self.name, board, status["board"])
            return 0
        uid = body["metadata"]["uid"]
        self.attempt = attempt_of(status)
        host, user = run_identity(uid)
        handed = HandedPlace.from_env(self.config.settings.run_place)
        # the place the operator handed over: the session's labgrid client knows only it (no
        # sync of the whole lab); without it, the client reads every place like any other
        self.coordinator = Coordinator(self.config.coordinator, host=host, user=user,
                                       place=handed if handed and handed.name == board else None)
        self.coordinator.connect_soon()     # the connection overlaps the Lease and set-up
        self.lifeline = Lifeline(self.kube, self.namespace, self.name, uid, self.identity,
                                 api_version_of(body), lease_seconds=self.config.lease_seconds,
                                 renew_seconds=self.config.renew_seconds)
        started = status.get("startTime")
        start_wall = _ts(started) if started else time.time()
        spec = BenchmarkRunSpec(**body["spec"])
        self.lifeline.deadline = time.monotonic() + (start_wall + spec.timeoutSeconds -
                                                     time.time())
        self.kube.outage_budget = max(10.0, self.lifeline.deadline - time.monotonic())
        self.status = StatusWriter(self.kube, self.lifeline, body)
        self.go_ahead = threading.Event()
        self.relay: Relay | None = None      # the seat it waits for, if the operator named one
        self.go_ahead_by = ""
        self.lifeline.on_run = lambda run: self._note_go_ahead(uid, run)
        self._note_go_ahead(uid, body)
        self.lifeline.on_tick = self.status.flush
        self.lifeline.on_wait = lambda text: self.status.progress(text, "Waiting", force=True)
        self.lifeline.on_stop = self._stop_board
        try:
            return self._leased(body, spec)
        finally:
            self.coordinator.close()

    def terminate(self) -> None:
        """SIGTERM (the pod or the process is going away): stop touching the board, upload
        what the spool holds for a short while, and say what could not be uploaded."""
        log.warning("%s/%s: told to stop; the board is left to the resumed session",
                    self.namespace, self.name)
        self.terminating.set()
        lifeline = getattr(self, "lifeline", None)
        if lifeline is not None:
            lifeline.fence()

    def _stop_board(self) -> None:
        if self.steps is not None and self.steps.session is not None:
            self.steps.session.stop()

    def _leased(self, body: dict[str, Any], spec: BenchmarkRunSpec) -> int:
        try:
            took = self.lifeline.take()
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
        self.lifeline.start()
        try:
            self._session(body, spec)
            return 0
        except Fenced:
            log.warning("%s/%s: this session was fenced (its Lease taken over, or told to "
                        "stop); it no longer touches the board", self.namespace, self.name)
            return 4
        finally:
            self.lifeline.release()

    # -- the session --------------------------------------------------------------------------
    def _session(self, body: dict[str, Any], spec: BenchmarkRunSpec) -> None:
        threading.Thread(target=_prewarm, name="prewarm", daemon=True).start()
        threading.Thread(target=_start_parsing, name="parse-server", daemon=True).start()
        status = body.get("status") or {}
        meta = body["metadata"]
        store = ArtifactStore(StoreConfig.from_env(self.config.settings))
        spool = Spool(self.config.spool / meta["uid"], store)
        spool.start()
        ctx = RunContext(
            namespace=self.namespace, name=self.name, uid=meta["uid"], spec=spec, suites=[],
            place=status["board"], attempt=attempt_of(status, 1),
            resume=int(status.get("resumes") or 0), deadline=self.lifeline.deadline,
            prefix=store.run_prefix(self.namespace, self.name, meta["uid"], spec.artifactPrefix),
            config=self.config, kube=self.kube, lifeline=self.lifeline, status=self.status,
            spool=spool, labels=dict(meta.get("labels") or {}))
        try:
            ctx.suites = self._admitted_suites(ctx, status)
            if status.get("boardReleased"):
                self._results_only(ctx, "its board was released before")
            else:
                self._on_board(ctx, started=bool(status.get("startTime")))
        except RunError as exc:   # what the status says was not what the operator admitted
            ctx.status.finish(Phase.failed, exc.reason, exc.message)
        except Cancelled:   # while waiting for a service, or the run was deleted
            if not self.lifeline.deleting.is_set():
                ctx.status.finish(Phase.cancelled, Reason.cancelled, "cancelled by spec.cancel")
        finally:
            self._drain(ctx)
            spool.stop()

    @staticmethod
    def _admitted_suites(ctx: RunContext, status: dict[str, Any]) -> list[SuiteSpec]:
        """The suites the operator resolved at admission, proven by its signature: a tenant
        who could write the run's status still cannot change what runs on the board."""
        try:
            key = trust.key_from(ctx.config.settings.environ)
        except ValueError as exc:
            raise RunError(f"the lab has no signing key for sessions ({exc}); an operator "
                           f"misconfiguration", reason=RunFailure.signing_key_missing) from exc
        suites = status.get("resolvedSuites")
        if not trust.verify(key, ctx.uid, suites, status.get("resolvedSuitesSignature")):
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

    def _lab_policy(self) -> LabPolicySpec:
        """The lab's one LabPolicy (`default`), read here once: never the tenant's word."""
        if self.policy is None:
            body = self.lifeline.wait_out("read the LabPolicy", lambda: self.kube.get_cluster(
                "labpolicies", "default"))
            self.policy = LabPolicySpec(**(body or {}).get("spec") or {})
        return self.policy

    def _device_type(self, name: str) -> DeviceType | None:
        return load_device_types(self.config.device_types).get(name) if name else None

    def _place_type(self, ctx: RunContext) -> tuple[Any, DeviceType | None]:
        places = self.lifeline.wait_out("read the place", self.coordinator.places)
        info = places.get(ctx.place)
        return info, self._device_type(info.tags.get("device_type", "") if info else "")

    def _results_only(self, ctx: RunContext, why: str) -> None:
        """Build the results from the checkpoints; the board is not touched (another run may
        hold it by now)."""
        log.info("%s/%s: %s; building the results without the board", ctx.namespace,
                 ctx.name, why)
        _, dtype = self._place_type(ctx)
        if dtype is None:
            ctx.status.finish(Phase.failed, RunFailure.place_missing, f"place {ctx.place} "
                              f"vanished or has an unknown device type; its results cannot be "
                              f"built")
            return
        ctx.status.progress("building the results", "Reporting", force=True)
        self._complete(ctx, dtype)

    def _complete(self, ctx: RunContext, dtype: DeviceType) -> None:
        cpu.lower(cpu.NO_BOARD_WAITS)   # the board is released: the rest waits for no board
        try:
            reporting.complete(ctx, dtype)
        except RunError as err:
            ctx.status.finish(Phase.failed, err.reason, err.message)
        except (Fenced, Cancelled):
            raise
        except Exception as err:  # a bug in reporting must not crash-loop the session
            log.exception("building the results of %s/%s failed", ctx.namespace, ctx.name)
            ctx.status.finish(Phase.failed, RunFailure.internal_error, f"building the results "
                              f"failed: {type(err).__name__}: {str(err)[:300]}")

    def _on_board(self, ctx: RunContext, *, started: bool) -> None:
        steps = ctx.plan()
        todo = st.remaining(steps, ctx.done_steps())
        if not todo:
            self._leave_board(ctx)
            self._results_only(ctx, "no step is left")
            return
        try:
            software = StepRunner.fetch_software(ctx, lambda: SoftwareCache(
                self.config.software_cache, ctx.spool.store,
                policy=self._lab_policy().for_namespace(ctx.namespace), namespace=ctx.namespace,
                settings=self.config.settings))
            self._standby(ctx, spec_started=started)
            self.lifeline.wait_out("acquire the place",
                                   lambda: self.coordinator.acquire(ctx.place))
            log.info("%s/%s: place %s acquired", ctx.namespace, ctx.name, ctx.place)
        except BoardBusy as exc:
            ctx.status.hand_back(ctx.attempt, HandBack.busy, exc)
            return
        except RunError as exc:
            ctx.status.finish(Phase.failed, exc.reason, exc.message)
            return
        info, dtype = self._place_type(ctx)
        if info is None or dtype is None:
            self._release(ctx)
            ctx.status.hand_back(ctx.attempt, HandBack.lab_fault, InfraError(
                f"place {ctx.place} vanished or has an unknown device type",
                reason=RunFailure.place_missing))
            return
        resumed = len(todo) < len(steps)
        if resumed:
            log.info("resuming %s/%s at %s; %d of %d step(s) finished before are kept",
                     ctx.namespace, ctx.name, todo[0].name, len(steps) - len(todo), len(steps))
        ctx.status.progress("resuming: power-cycling the board" if resumed else "board acquired",
                            Underway.resuming if resumed else Underway.booting,
                            extra={} if started else {"startTime": now_iso()}, force=resumed)
        runner = self.steps = StepRunner(ctx, dtype)
        runner.software = software
        settings = self.config.settings
        runner.parse = BudgetedParse(settings.parse_cpu_seconds, settings.parse_memory_mib,
                                     stopped=lambda: self.lifeline.fenced.is_set() or
                                     self.lifeline.cancel.is_set())
        runner.max_metrics = self._lab_policy().for_namespace(ctx.namespace).maxMetricsPerRun
        runner.steps_total, runner.steps_done = len(steps), len(steps) - len(todo)
        serial_log = SerialLog(ctx.spool.append_path(ctx.serial_key()))
        environment = {**self.config.environment, **iperf3_peer(info.tags.get(PEER_TAG, "")),
                       "BENCHFARM_RUN": f"{ctx.namespace}/{ctx.name}"}
        runner.session = BoardSession(ctx.place, info.resources, dtype,
                                      self.lifeline.wait_out("connect to the coordinator",
                                                             self.coordinator.session),
                                      deadline=ctx.deadline, serial_log=serial_log,
                                      environment=environment, guard=lambda: self._guard(ctx))
        if self.lifeline.cancel.is_set():
            runner.session.cancelled.set()
        failure: BaseException | None = None
        try:
            runner.run(todo)
        except Fenced:
            raise
        except Exception as exc:  # judged below; a bug must not leave the board on
            failure = exc
            if verdict(exc).settled == Settled.internal:
                log.exception("unexpected error in the session of %s/%s", ctx.namespace,
                              ctx.name)
        finally:
            serial_log.close()
        self.lifeline.check()
        decided = verdict(None if failure is None else failure)
        if self.lifeline.cancel.is_set():   # stop() closed the console: whatever broke, it was us
            decided = Verdict(Settled.cancelled)
        if decided.touches_board:
            self._power_off(runner.session)
            self._release(ctx)
        ctx.spool.put_file(ctx.serial_key())
        self._settle(ctx, dtype, decided)

    def _settle(self, ctx: RunContext, dtype: DeviceType, decided: Verdict) -> None:
        exc = decided.exc
        if decided.settled == Settled.completed:
            ctx.status.progress("board released; building the results", "Reporting",
                                extra={"boardReleased": True}, force=True)
            self._complete(ctx, dtype)
        elif decided.settled == Settled.cancelled:
            if not self.lifeline.deleting.is_set():
                ctx.status.finish(Phase.cancelled, Reason.cancelled, "cancelled by spec.cancel")
        elif decided.settled == Settled.failed:
            assert isinstance(exc, RunError)
            ctx.status.finish(Phase.failed, exc.reason, exc.message,
                              {"boardReleased": True})
        elif decided.settled == Settled.internal:
            ctx.status.finish(Phase.failed, RunFailure.internal_error, f"the session failed "
                              f"unexpectedly: {type(exc).__name__}: {str(exc)[:300]}",
                              {"boardReleased": True})
        else:
            assert decided.hand_back is not None and exc is not None
            ctx.status.hand_back(ctx.attempt, decided.hand_back, exc)

    # -- standby ------------------------------------------------------------------------------
    def _note_go_ahead(self, uid: str, body: dict[str, Any]) -> None:
        """The run as this session last saw it: its go-ahead, if the operator signed one for
        the attempt this session was launched for (a tenant's write is not one)."""
        status = body.get("status") or {}
        attempt = attempt_of(status)
        try:
            key = trust.key_from(self.config.settings.environ)
        except ValueError:   # the session fails on its suites' signature first, and says why
            return
        go = trust.read_go_ahead(key, uid, attempt, status.get(GO_AHEAD_FIELD))
        if go is None or attempt != self.attempt:
            return
        if go.after is None:
            self._go("the operator's")
        elif go.after != self.relay:    # its seat is the one this holder gives up
            self.relay = relay = go.after
            self.coordinator.on_release(relay.place, relay.holder,
                                        lambda: self._go(f"relay: {relay.place} released"))

    def _go(self, by: str) -> None:
        if not self.go_ahead.is_set():
            self.go_ahead_by = by
            self.go_ahead.set()

    def _standby(self, ctx: RunContext, *, spec_started: bool) -> None:
        """Launched on standby: ready to take the board, wait for the operator's go-ahead (a
        free session seat; `api.grants.GoAhead`). The run's time counts from the go-ahead."""
        if self.go_ahead.is_set():
            return
        log.info("%s/%s: on standby; waiting for the operator's go-ahead", ctx.namespace,
                 ctx.name)
        t = time.monotonic()
        while not self.go_ahead.wait(0.5):
            self.lifeline.check()
            if self.lifeline.cancel.is_set():
                raise Cancelled("cancelled on standby, before it took its board")
            if time.monotonic() > self.lifeline.deadline:
                raise RunError(f"no session seat became free within the run's timeout "
                               f"({ctx.spec.timeoutSeconds} s)", reason=RunFailure.run_timeout)
        log.info("%s/%s: go-ahead after %.2f s on standby (%s)", ctx.namespace, ctx.name,
                 time.monotonic() - t, self.go_ahead_by)
        if not spec_started:      # the run's time starts with its board
            ctx.deadline = self.lifeline.deadline = time.monotonic() + ctx.spec.timeoutSeconds
            self.kube.outage_budget = max(10.0, ctx.spec.timeoutSeconds)

    # -- the board ----------------------------------------------------------------------------
    def _guard(self, ctx: RunContext) -> None:
        """Before every power operation: still our Lease, still our place."""
        self.lifeline.check()
        holder = self.lifeline.wait_out("check the place",
                                        lambda: self.coordinator.holder(ctx.place))
        if holder == self.coordinator.identity:
            return
        if holder is None:  # the coordinator restarted and forgot every lock: take it back
            log.warning("place %s lost its lock (coordinator restart?); acquiring it again",
                        ctx.place)
            self.lifeline.wait_out("re-acquire the place",
                                   lambda: self.coordinator.acquire(ctx.place))
            return
        raise BoardBusy(f"place {ctx.place} is now held by {holder}; not touching it")

    def _leave_board(self, ctx: RunContext) -> None:
        """No step left, but a session of this run may have died before it let go of the
        board: release the place only if this run's identity still holds it (the board is
        powered off by the next boot of whoever gets it; never one another run holds)."""
        holder = self.lifeline.wait_out("check the place",
                                        lambda: self.coordinator.holder(ctx.place))
        if holder == self.coordinator.identity:
            self._release(ctx)

    def _power_off(self, session: BoardSession | None) -> None:
        if session is None or self.lifeline.fenced.is_set():
            return
        session.power_off_and_close(passes=(Fenced,))

    def _release(self, ctx: RunContext) -> None:
        if self.lifeline.fenced.is_set():
            return
        try:
            self.lifeline.wait_out("release the place",
                                   lambda: self.coordinator.release(ctx.place))
        except InfraError as exc:   # the coordinator is away: its lock expires with the session
            log.warning("could not release %s: %s", ctx.place, exc)


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


def _ts(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


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
    _logging(settings)
    log.info("session of %s: started %.2f s after its process (Python and imports)", ref,
             _process_age())
    namespace, _, name = ref.partition("/")
    if not name:
        print("benchfarm session run: expected NAMESPACE/NAME", flush=True)
        return 2
    runner = Runner(namespace, name, Config.from_env(settings))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: runner.terminate())
    return runner.run()
