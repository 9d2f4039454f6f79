"""BenchmarkBisections: the operator makes each step's A/B run, reads its pairs, and says what
the search found.

A bisection's runs are ordinary BenchmarkRuns of its namespace (owned by it), so they wait in the
same fair queue under the same limits and the same checks of their software as every other run,
and deleting the bisection deletes them. What to do next is decided by `core.bisection.plan` from
the bisection and its runs (the runs are the steps' checkpoints: an operator restarted anywhere
reads the same course back); this module does the reading and writing on its own worker thread
(`operator.worker`), fed by the watch events of bisections and of their runs. A step's pairs are
read from its run's metrics.json in the store (a finished run's document does not change: kept,
a bounded number of them, so a bisection of many steps is not read again at every event). An
outage of the API server or the store is waited out; the bisection is tried again.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from benchfarm.api.bisections import (
    BISECTION_LABEL,
    BISECTION_UID_LABEL,
    BenchmarkBisectionSpec,
    BenchmarkBisectionStatus,
    BisectionReason,
)
from benchfarm.api.outcomes import FINISHED, BisectionAnswer, Condition, Phase
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.core.bisection.judge import percent
from benchfarm.core.bisection.plan import Pairs, Plan, answer_status, pairs_of, plan
from benchfarm.core.conditions import get_condition, set_condition
from benchfarm.core.policy.runkey import RunKey, disagreement
from benchfarm.kubeapi.client import Kube
from benchfarm.kubeapi.refusals import api_message
from benchfarm.operator.worker import Worker
from benchfarm.store.artifacts import ArtifactStore, run_prefix

log = logging.getLogger(__name__)
PLURAL = "benchmarkbisections"
KEPT_DOCUMENTS = 4096      # the pairs of finished runs, by run uid (a few numbers each)


class Bisections:
    def __init__(self, kube: Kube, store: ArtifactStore) -> None:
        self.kube, self.store = kube, store
        self._pairs: OrderedDict[tuple[str, int], Pairs | None] = OrderedDict()
        self._worker = Worker("bisection", self.reconcile, log)

    # -- what the watch streams tell ----------------------------------------------------------
    def observe_bisection(self, event_type: str | None, body: dict[str, Any]) -> None:
        if event_type != "DELETED":
            self._worker.mark(f"{body['metadata']['namespace']}/{body['metadata']['name']}")

    def observe_run(self, body: dict[str, Any]) -> None:
        bisection = (body["metadata"].get("labels") or {}).get(BISECTION_LABEL)
        if bisection:
            self._worker.mark(f"{body['metadata']['namespace']}/{bisection}")

    def stop(self) -> None:
        self._worker.stop()

    # -- one bisection ---------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        ns, name = key.split("/", 1)
        body = self.kube.get_custom(PLURAL, ns, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        generation = body["metadata"].get("generation", 1)
        seen = BenchmarkBisectionStatus.of(body.get("status"))
        if seen.phase in FINISHED and seen.observedGeneration == generation:
            return        # answered (or failed, cancelled) and nothing asked since
        try:
            spec = BenchmarkBisectionSpec(**body.get("spec") or {})
        except ValidationError as exc:   # the schema admits only valid ones; an older one here
            self._finish(body, Phase.failed, BisectionReason.invalid_spec, str(exc), {})
            return
        runs = self.kube.list_custom("benchmarkruns", ns,
                                     f"{BISECTION_UID_LABEL}={body['metadata']['uid']}")
        p = plan(body, spec, runs, lambda run, build: self._pairs_of(spec, run, build))
        fields = self._fields(spec, p, runs)
        refused = self._create(body, p)
        if refused:
            self._finish(body, Phase.failed, BisectionReason.run_refused, refused, fields)
            return
        for run in p.cancel:
            self.kube.patch_custom("benchmarkruns", ns, run, {"spec": {"cancel": True}})
        if p.failure is not None:
            self._finish(body, Phase.failed, p.failure[0], p.failure[1], fields)
        elif p.found is not None:
            self._answered(body, spec, p, fields)
        elif spec.cancel and not p.cancel and not p.create:
            self._finish(body, Phase.cancelled, BisectionReason.cancelled,
                         f"cancelled after {len(p.steps)} steps", fields)
        else:
            step = p.steps[-1] if p.steps else None
            fields["phase"] = Phase.running if p.board else Phase.pending
            fields["conditions"] = set_condition(
                seen.conditions, Condition.succeeded, "Unknown", BisectionReason.running,
                f"step {len(p.steps)} of at most {p.max_steps}: build {step.name}, {step.pairs} "
                f"pairs" if step else "starting", generation)
            self.kube.patch_custom(PLURAL, ns, name, {"status": fields}, status=True)

    def _pairs_of(self, spec: BenchmarkBisectionSpec, run: Mapping[str, Any],
                  build: int) -> Pairs | None:
        """A succeeded run's pairs, from its metrics.json (kept once read)."""
        meta = run["metadata"]
        key = (meta["uid"], build)
        if key in self._pairs:
            self._pairs.move_to_end(key)
            return self._pairs[key]
        prefix = run_prefix(meta["namespace"], meta["name"], meta["uid"],
                            (run.get("spec") or {}).get("artifactPrefix", ""))
        doc = self.store.get_document(f"{prefix}/metrics.json")
        problem = disagreement(doc, RunKey(meta["namespace"], meta["name"], meta["uid"])) \
            if doc is not None else "no metrics.json"
        if problem:
            log.warning("bisection run %s/%s: %s; no pairs", meta["namespace"], meta["name"],
                        problem)
            got = None
        else:
            got = pairs_of(doc, spec.metric, spec.good_build.name, spec.builds[build].name)
        self._pairs[key] = got
        if len(self._pairs) > KEPT_DOCUMENTS:
            self._pairs.popitem(last=False)
        return got

    def _fields(self, spec: BenchmarkBisectionSpec, p: Plan,
                runs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"board": p.board, "steps": [s.model_dump(exclude_defaults=True) for s in p.steps],
                "pairs": p.pairs, "maxSteps": p.max_steps,
                "boardSeconds": round(sum(_board_seconds(r) for r in runs), 1)}

    def _create(self, body: dict[str, Any], p: Plan) -> str:
        """Make the run the plan asks for; what the API refused (a tenant's input), if any."""
        for run in p.create:
            try:
                self.kube.create_custom("benchmarkruns", body["metadata"]["namespace"], run)
            except ApiException as exc:   # 4xx: the schema or a policy refused what it names
                message = f"run {run['metadata']['name']}: {api_message(exc)}"
                self.kube.event(body, "Warning", BisectionReason.run_refused, message)
                return message
        return ""

    def _answered(self, body: dict[str, Any], spec: BenchmarkBisectionSpec, p: Plan,
                  fields: dict[str, Any]) -> None:
        answer = answer_status(spec, p)
        assert answer is not None and p.found is not None
        fields["answer"] = answer.model_dump(exclude_none=True)
        tally = f"{len(p.steps)} steps (at most {p.max_steps}), {p.pairs} pairs, " \
                f"{fields['boardSeconds']:.0f} s of board time"
        if answer.kind == BisectionAnswer.no_change:
            message = f"no change in the range: every build up to {spec.builds[-1].name} " \
                      f"measured good; {tally}"
        elif answer.firstBad is None:
            message = f"no build measured bad; the change, if any, is in one of " \
                      f"{', '.join(answer.suspects)} (skipped or unclear); {tally}"
        else:
            effect = next(s for s in p.steps if s.name == answer.firstBad)
            head = f"first bad build {answer.firstBad}" if answer.kind == BisectionAnswer.culprit \
                else f"the first bad build is one of {', '.join(answer.suspects)}"
            ci = effect.ci95 if len(effect.ci95) == 2 else [None, None]
            message = (f"{head} ({percent(effect.effect)} worse, 95 % CI {percent(ci[0])} to "
                       f"{percent(ci[1])}; last good {answer.lastGood}); {tally}")
        self._finish(body, Phase.succeeded, BisectionReason.of(answer.kind), message, fields)
        self.kube.event(body, "Normal", BisectionReason.of(answer.kind), message)

    def _finish(self, body: dict[str, Any], phase: Phase, reason: str, message: str,
                fields: dict[str, Any]) -> None:
        meta = body["metadata"]
        generation = meta.get("generation", 1)
        seen = BenchmarkBisectionStatus.of(body.get("status"))
        before = get_condition(seen.conditions, Condition.succeeded) or {}
        fields = {**fields, "phase": phase, "observedGeneration": generation,
                  "conditions": set_condition(seen.conditions, Condition.succeeded,
                                              "True" if phase == Phase.succeeded else "False",
                                              reason, message, generation)}
        self.kube.patch_custom(PLURAL, meta["namespace"], meta["name"], {"status": fields},
                               status=True)
        if before.get("reason") != reason and phase != Phase.succeeded:
            self.kube.event(body, "Warning", reason, message)


def _board_seconds(run: Mapping[str, Any]) -> float:
    """How long the run held its board: from its start to its completion (0 before both)."""
    seen = BenchmarkRunStatus.of(run.get("status"))
    try:
        start = dt.datetime.fromisoformat((seen.startTime or "").replace("Z", "+00:00"))
        end = dt.datetime.fromisoformat((seen.completionTime or "").replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (end - start).total_seconds())

