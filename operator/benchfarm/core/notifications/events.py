"""Notification events, derived from what the API says (a run's status, a lease's, a campaign's,
a change point, a board's quarantine). Pure.

Each event has a `key` that names it for good: seen again (every finished run, when the operator
restarts) it makes no second delivery.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchfarm.api.notifications import Event, EventKind, ObjectRef
from benchfarm.api.outcomes import FINISHED, Condition

SUMMARY_CHARS = 300


def _ref(kind: str, meta: Mapping[str, Any]) -> ObjectRef:
    return ObjectRef(kind=kind, name=str(meta.get("name", "")),
                     namespace=str(meta.get("namespace", "")), uid=str(meta.get("uid", "")))


def _cond(status: Mapping[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def _short(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


def run_events(body: Mapping[str, Any]) -> list[Event]:
    """A finished run's events: RunFinished, and Regression when it regressed against its
    baseline (its Regressed condition)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    spec = body.get("spec") or {}
    phase, done = status.get("phase"), status.get("completionTime")
    if phase not in FINISHED or not done:
        return []
    ref = _ref("BenchmarkRun", meta)
    succeeded, regressed = _cond(status, Condition.succeeded), _cond(status, Condition.regressed)
    details = {"phase": phase, "reason": succeeded.get("reason", ""),
               "message": succeeded.get("message", ""), "board": status.get("board") or "",
               "plan": spec.get("plan") or "(inline)",
               "deviceType": (spec.get("selector") or {}).get("deviceType") or "",
               "startTime": status.get("startTime") or "", "completionTime": done,
               "results": status.get("results") or {}, "artifacts": status.get("artifacts") or [],
               "baseline": spec.get("baseline") or ""}
    where = f" on {details['board']}" if details["board"] else ""
    out = [Event(kind=EventKind.run_finished, key=f"{EventKind.run_finished}/{ref.uid}",
                 namespace=ref.namespace, occurredAt=done, object=ref, details=details,
                 summary=_short(f"run {ref.namespace}/{ref.name} {phase}{where}: "
                                f"{details['reason']}: {details['message']}"))]
    if regressed.get("status") == "True":
        out.append(Event(kind=EventKind.regression, key=f"{EventKind.regression}/{ref.uid}",
                         namespace=ref.namespace, occurredAt=done, object=ref,
                         details={**details, "regression": regressed.get("message", "")},
                         summary=_short(f"run {ref.namespace}/{ref.name} regressed against "
                                        f"{details['baseline'] or 'its baseline'}: "
                                        f"{regressed.get('message', '')}")))
    return out


def campaign_event(body: Mapping[str, Any]) -> Event | None:
    """A campaign that has ended (published, or could not publish): CampaignFinished, with its
    guide, its changes against the previous release and their verdict."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    cond = _cond(status, Condition.succeeded)
    if cond.get("status") not in ("True", "False") or not cond.get("lastTransitionTime"):
        return None
    ref = _ref("BenchmarkCampaign", meta)
    regressed = _cond(status, Condition.regressed)
    release = (body.get("spec") or {}).get("release", "")
    details = {"release": release, "phase": status.get("phase") or "",
               "reason": cond.get("reason", ""), "message": cond.get("message", ""),
               "done": status.get("done") or "", "guide": status.get("guide") or {},
               "changes": status.get("changes") or {}, "previous": status.get("previous") or "",
               "regressed": regressed.get("status", ""),
               "regression": regressed.get("message", "")}
    verdict = f"; {regressed['message']}" if regressed.get("status") == "True" else ""
    return Event(kind=EventKind.campaign_finished,
                 key=f"{EventKind.campaign_finished}/{ref.uid}/{meta.get('generation', 1)}",
                 namespace=ref.namespace, occurredAt=cond["lastTransitionTime"], object=ref,
                 details=details,
                 summary=_short(f"campaign {ref.namespace}/{ref.name} (release {release}) "
                                f"{cond.get('reason', '')}: {cond.get('message', '')}{verdict}"))


def bisection_event(body: Mapping[str, Any]) -> Event | None:
    """A bisection that has ended (answered, failed or cancelled): BisectionFinished, with its
    answer (the first bad build, the suspects, the last good one, the effect) and its cost."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    cond = _cond(status, Condition.succeeded)
    if cond.get("status") not in ("True", "False") or not cond.get("lastTransitionTime"):
        return None
    ref = _ref("BenchmarkBisection", meta)
    raw = status.get("answer")
    answer = dict(raw) if isinstance(raw, Mapping) else {}
    details = {"metric": (body.get("spec") or {}).get("metric", ""),
               "phase": status.get("phase") or "", "reason": cond.get("reason", ""),
               "message": cond.get("message", ""), "answer": answer,
               "steps": len(status.get("steps") or []), "pairs": status.get("pairs") or 0,
               "boardSeconds": status.get("boardSeconds") or 0}
    return Event(kind=EventKind.bisection_finished,
                 key=f"{EventKind.bisection_finished}/{ref.uid}/{meta.get('generation', 1)}",
                 namespace=ref.namespace, occurredAt=cond["lastTransitionTime"], object=ref,
                 details=details,
                 summary=_short(f"bisection {ref.namespace}/{ref.name} {cond.get('reason', '')}: "
                                f"{cond.get('message', '')}"))


def lease_event(kind: EventKind, meta: Mapping[str, Any], status: Mapping[str, Any],
                at: str, message: str) -> Event:
    """LeaseGranted (once per grant), LeaseEnding (once per expiry time: an extension warns
    again), LeaseEnded (once)."""
    ref = _ref("BoardLease", meta)
    key = {EventKind.lease_granted: f"{kind}/{ref.uid}/{status.get('grantedAt', '')}",
           EventKind.lease_ending: f"{kind}/{ref.uid}/{status.get('expiresAt', '')}",
           }.get(kind, f"{kind}/{ref.uid}")
    details = {"place": status.get("place") or "", "expiresAt": status.get("expiresAt") or "",
               "grantedAt": status.get("grantedAt") or "", "message": message}
    return Event(kind=kind, key=key, namespace=ref.namespace, occurredAt=at, object=ref,
                 details=details,
                 summary=_short(f"lease {ref.namespace}/{ref.name}: {message}"))


def change_point_event(namespace: str, run: str, run_uid: str, series: Mapping[str, str],
                       at: str, message: str, details: Mapping[str, Any]) -> Event:
    ref = ObjectRef(kind="BenchmarkRun", name=run, namespace=namespace, uid=run_uid)
    key = "/".join([EventKind.change_point, namespace, series.get("metric", ""),
                    series.get("deviceType", ""), series.get("plan", ""), run_uid])
    return Event(kind=EventKind.change_point, key=key, namespace=namespace, occurredAt=at,
                 object=ref, details={**series, **details, "message": message},
                 summary=_short(f"change point at run {namespace}/{run}: {message}"))


def board_event(kind: EventKind, board: str, at: str, message: str) -> Event:
    """BoardQuarantined or BoardBack (the lab admin's): once per quarantine and return."""
    return Event(kind=kind, key=f"{kind}/{board}/{at}", namespace="", occurredAt=at,
                 object=ObjectRef(kind="Board", name=board), details={"message": message},
                 summary=_short(f"board {board}: {message}"))
