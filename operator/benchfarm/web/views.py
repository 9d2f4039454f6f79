"""What the dashboard's pages show, from the objects as the API server returns them. Pure.

The lab page: each board's state as a person reads it (idle, busy with which run, quarantined,
held by a person, in maintenance, offline) and the queue with each waiting run's place and an
estimated start. The place is the scheduler's own order (core.scheduling.fairness: priority, then namespaces
taking turns); the estimate plays that order forward over the boards each run fits, every run
taking as long as the finished runs of its plan and device type took (their median).

The run page's "Measured under" (`measured_under`): the report's per-step conditions tables,
from the run's metrics.json.

The history page's menus (`history_menus`): a series is one namespace's, so the namespace is
chosen first and the metric, device type and plan menus list that namespace's series only.

A change point's bisection (`bisection_draft`): the BenchmarkBisection that asks which build
between the last good run's and the change point's run made the change, for a person to
complete (the builds between them) and create.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.boards import BoardState, held_by
from benchfarm.api.outcomes import FINISHED, Condition, LeasePhase, Phase
from benchfarm.core.conditions import seconds_of
from benchfarm.core.scheduling import durations, queue as q
from benchfarm.core.scheduling.boardindex import BoardView, matches
from benchfarm.core.scheduling.fairness import RoundRobinFairness
from benchfarm.report.conditions import StepTable, step_tables


class SeriesKey(NamedTuple):
    """One namespace's series: its runs of a metric on a device type under a plan."""
    namespace: str
    metric: str
    device_type: str
    plan: str


@dataclass
class HistoryMenus:
    want: SeriesKey                  # the series the page shows (or says it has no runs of)
    known: bool                      # whether that series has runs the person may read
    namespaces: list[str]            # the namespaces the person may read that have series
    choices: dict[str, list[str]]    # "metric", "device_type", "plan": of `want.namespace` only


def history_menus(keys: Iterable[SeriesKey], may_read: Any,
                  query: Mapping[str, str]) -> HistoryMenus:
    """The series a history page shows and its menus, from the series the source gave for the
    person (`may_read(namespace)`: checked again here, whatever the source did) and the page's
    query (`namespace`, `metric`, `deviceType`, `plan`). Without a namespace asked for, the
    first of the person's; without a metric, that namespace's first series. The metric, device
    type and plan menus hold the chosen namespace's series only: another namespace's step names
    never show."""
    mine = sorted(k for k in keys if may_read(k.namespace))
    namespaces = sorted({k.namespace for k in mine})
    ns = query.get("namespace", "") or (namespaces[0] if namespaces else "")
    if not may_read(ns):
        ns = ""
    own = [k for k in mine if k.namespace == ns]
    want = SeriesKey(ns, query.get("metric", ""), query.get("deviceType", ""),
                     query.get("plan", ""))
    if want not in own and own and not want.metric:
        want = own[0]
    choices = {f: sorted({getattr(k, f) for k in own}) for f in ("metric", "device_type", "plan")}
    return HistoryMenus(want, want in own, namespaces, choices)


DEFAULT_DURATION = 600.0     # seconds a run is expected to take when no run like it finished yet


def local_path(value: object, default: str = "/lab") -> str:
    """Where the sign-in page may send a person: a path on this site, else `default`.

    A path starts with one `/` and holds only printable ASCII without spaces or backslashes:
    a browser reads `//host`, `/\\host` and `/<TAB>/host` (it drops tabs and newlines) as
    another site, and a scheme (`https:`, `javascript:`) never starts with `/`. Percent-encoded
    text is left as it is: a browser does not decode it to find the host."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith("//"):
        return default
    if any(not 33 <= ord(c) <= 126 or c == "\\" for c in value):
        return default
    return value


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return seconds_of(value)


def key_of(run: Mapping[str, Any]) -> str:
    meta = run.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def phase_of(run: Mapping[str, Any]) -> str:
    return (run.get("status") or {}).get("phase") or Phase.pending


def _holder(status: Mapping[str, Any]) -> str | None:
    """Who else holds the board: labgrid's holder as the operator records it, or the holder of
    a lease of the board when its status carries one (a person's reservation)."""
    lease: dict[str, Any] = status["lease"] if isinstance(status.get("lease"), dict) else {}
    return held_by(status.get("run")) or lease.get("holder") or lease.get("holderIdentity")


@dataclass
class BoardRow:
    name: str
    device_type: str
    state: str            # idle | busy | quarantined | held | maintenance | offline
    detail: str = ""      # the run (when the person may see it), the holder, the reason
    run: str | None = None


def board_rows(boards: Iterable[Mapping[str, Any]], may_read: Any) -> dict[str, list[BoardRow]]:
    """Boards by device type. `may_read(namespace)`: whether the person may see a run of it (a
    run of another namespace shows as "a run of another namespace")."""
    out: dict[str, list[BoardRow]] = defaultdict(list)
    for b in sorted(boards, key=lambda b: (b.get("metadata") or {}).get("name", "")):
        name = (b.get("metadata") or {}).get("name", "")
        st = b.get("status") or {}
        dtype = st.get("deviceType") or ((b.get("metadata") or {}).get("labels") or {}).get(
            "benchfarm.io/device-type", "unknown")
        state = str(st.get("state") or "Offline")
        run = st.get("run") or ""
        holder = _holder(st)
        row = BoardRow(name, dtype, "offline")
        if holder:
            row.state, row.detail = "held", f"held by {holder}"
        elif (leased := q.lease_of(run)) is not None:     # a person's BoardLease
            row.state = "held"
            row.detail = f"leased: {leased}" if may_read(leased.split("/", 1)[0]) else \
                "leased by another namespace"
        elif state == BoardState.quarantined:
            row.state, row.detail = "quarantined", st.get("reason") or ""
        elif state == BoardState.maintenance or (b.get("spec") or {}).get("maintenance"):
            row.state, row.detail = "maintenance", "drained"
        elif state == BoardState.busy or run:
            row.state = "busy"
            if run and may_read(run.split("/", 1)[0]):
                row.run, row.detail = run, run
            else:
                row.detail = "a run of another namespace"
        elif state == "Idle":
            row.state = "idle"
        else:
            row.detail = st.get("reason") or ""
        out[dtype].append(row)
    return dict(sorted(out.items()))


@dataclass
class QueueRow:
    run: str                      # "<namespace>/<name>" of the run, or of the lease
    namespace: str
    position: int                 # in the whole lab's queue (1 = next)
    priority: int
    selector: str
    estimated_start: float | None  # seconds since the epoch; None: see `waits_for`
    waits_for: str = ""            # why there is no estimate
    lease: bool = False            # a person's BoardLease, not a run


@dataclass
class Durations:
    by_kind: dict[tuple[str, str], float] = field(default_factory=dict)
    overall: float = DEFAULT_DURATION

    @classmethod
    def of(cls, runs: Iterable[Mapping[str, Any]]) -> Durations:
        taken: dict[tuple[str, str], list[float]] = defaultdict(list)
        for r in runs:
            st = r.get("status") or {}
            start, end = parse_time(st.get("startTime")), parse_time(st.get("completionTime"))
            if st.get("phase") == Phase.succeeded and start and end and end >= start:
                taken[_kind(r)].append(end - start)
        every = [s for v in taken.values() for s in v]
        return cls({k: statistics.median(v) for k, v in taken.items()},
                   statistics.median(every) if every else DEFAULT_DURATION)

    def of_run(self, run: Mapping[str, Any]) -> float:
        return self.by_kind.get(_kind(run), self.overall)


def _kind(run: Mapping[str, Any]) -> tuple[str, str]:
    spec = run.get("spec") or {}
    return spec.get("plan") or "", (spec.get("selector") or {}).get("deviceType") or ""


def _selector(run: Mapping[str, Any]) -> q.Selector:
    sel = (run.get("spec") or {}).get("selector") or {}
    return q.Selector.of(sel.get("deviceType"), sel.get("labels"), sel.get("board"))


def _lease_seconds(lease: Mapping[str, Any]) -> float:
    try:
        return float(durations.parse(str((lease.get("spec") or {}).get("duration", ""))))
    except ValueError:
        return 0.0


def queue_rows(runs: list[Mapping[str, Any]], boards: list[Mapping[str, Any]], now: float,
               last_served: Mapping[str, float] | None = None,
               leases: Sequence[Mapping[str, Any]] = ()) -> list[QueueRow]:
    """Every waiting run and BoardLease in the order the scheduler walks them (one queue), with
    an estimated start: a lease holds its board for its duration, a granted one until it
    expires."""
    waiting = [r for r in runs if phase_of(r) == Phase.pending and
               not (r.get("spec") or {}).get("cancel")]
    queued = {}
    for r in waiting:
        meta = r.get("metadata") or {}
        queued[key_of(r)] = (r, q.QueueEntry(
            key_of(r), meta.get("namespace", ""), int((r.get("spec") or {}).get("priority", 100)),
            parse_time(meta.get("creationTimestamp")) or now, _selector(r)))
    held_until: dict[str, float] = {}       # the lease key of a granted lease -> its expiry
    for lease in leases:
        meta, st = lease.get("metadata") or {}, lease.get("status") or {}
        key = q.lease_key(meta.get("namespace", ""), meta.get("name", ""))
        phase = st.get("phase") or LeasePhase.pending
        if phase == LeasePhase.granted:
            held_until[key] = parse_time(st.get("expiresAt")) or now
        elif phase == LeasePhase.pending and not (lease.get("spec") or {}).get("release"):
            queued[key] = (lease, q.QueueEntry(
                key, meta.get("namespace", ""), int((lease.get("spec") or {}).get("priority", 100)),
                parse_time(meta.get("creationTimestamp")) or now, _selector(lease),
                kind=q.EntryKind.lease))
    fairness = RoundRobinFairness()
    fairness.last_served.update(last_served or {})
    order = fairness.order(v[1] for v in queued.values())
    runtimes = Durations.of(runs)
    by_key = {key_of(r): r for r in runs}
    free_at: dict[str, float] = {}
    out: dict[str, str] = {}           # boards no estimate counts on, and why
    views = []
    for b in boards:
        name = (b.get("metadata") or {}).get("name", "")
        st = b.get("status") or {}
        views.append(BoardView(name, st.get("deviceType") or "", st.get("labels") or {}))
        state, run = st.get("state"), st.get("run") or ""
        if state in ("Quarantined", "Offline", "Maintenance") or _holder(st) \
                or (b.get("spec") or {}).get("maintenance"):
            out[name] = "held by a person" if _holder(st) else str(state or "maintenance").lower()
            continue                       # no estimate counts on a board that is out
        if run and run in by_key:
            busy = by_key[run]
            started = parse_time((busy.get("status") or {}).get("startTime")) or now
            free_at[name] = max(now, started + runtimes.of_run(busy))
        elif run in held_until:
            free_at[name] = max(now, held_until[run])
        else:
            free_at[name] = now
    rows = []
    for position, qr in enumerate(order, start=1):
        run = queued[qr.key][0]
        fits = [v.name for v in views if v.name in free_at and matches(qr.selector, v)]
        eta, waits = None, ""
        if fits:
            board = min(fits, key=lambda n: (free_at[n], n))
            eta = free_at[board]
            free_at[board] = eta + (_lease_seconds(run) if qr.kind == q.EntryKind.lease
                                    else runtimes.of_run(run))
        else:
            outs = sorted(f"{v.name} {out[v.name]}" for v in views
                          if v.name in out and matches(qr.selector, v))
            waits = "every board it fits is out: " + ", ".join(outs) if outs else \
                "no board of the lab fits it"
        sel = (run.get("spec") or {}).get("selector") or {}
        is_lease = qr.kind == q.EntryKind.lease
        rows.append(QueueRow(q.lease_of(qr.key) or qr.key if is_lease else qr.key, qr.namespace,
                             position, qr.priority, sel.get("board") or sel.get("deviceType") or "",
                             eta, waits, is_lease))
    return rows


def measured_under(raw: bytes | None) -> list[tuple[str, StepTable]]:
    """What each step of a run was measured under (report.conditions), from its metrics.json as
    the store gave it (None: none yet): (a side's label or "", the step's table) in step order,
    each A/B side's steps under its label. A document that is no JSON object shows nothing."""
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return []
    if not isinstance(doc, dict):
        return []
    sides = doc.get("sides")
    docs = list(sides.items()) if isinstance(sides, dict) else [("", doc)]
    return [(str(label), t) for label, d in docs if isinstance(d, dict) for t in step_tables(d)]


FILTERS = ("namespace", "phase", "plan", "deviceType", "board", "q")


def run_row(run: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, st = run.get("metadata") or {}, run.get("spec") or {}, run.get("status") or {}
    cond: dict[str, Any] = next(
        (c for c in st.get("conditions") or [] if c.get("type") == Condition.succeeded), {})
    return {"key": key_of(run), "namespace": meta.get("namespace", ""), "name": meta.get("name"),
            "phase": phase_of(run), "reason": cond.get("reason", ""), "plan": spec.get("plan") or "",
            "deviceType": (spec.get("selector") or {}).get("deviceType") or "",
            "board": st.get("board") or "", "created": meta.get("creationTimestamp") or "",
            "software": (spec.get("software") or {}).get("name") or "",
            "finished": phase_of(run) in FINISHED}


def filter_runs(rows: Iterable[dict[str, Any]], filters: Mapping[str, str]) -> list[dict[str, Any]]:
    """Rows whose fields equal every filter given (`q`: a part of the name), newest first."""
    out = []
    for row in rows:
        if all(not filters.get(f) or str(row.get(f, "")) == filters[f]
               for f in FILTERS if f != "q") and \
                (not filters.get("q") or filters["q"].lower() in str(row["name"]).lower()):
            out.append(row)
    return sorted(out, key=lambda r: (r["created"], r["key"]), reverse=True)


Point = Mapping[str, Any]
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _software_of(point: Point, runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The software a point's run booted on its side (B: softwareB), named by its history label
    (or, without one, by its run's name) as a software set's name may be written."""
    spec = (runs.get(point["run"]) or {}).get("spec") or {}
    software = dict(spec.get("softwareB" if point.get("side") == "B" else "software") or {})
    name = point.get("software") or software.get("name") or str(point["run"]).rsplit("/", 1)[-1]
    return {**software, "name": _NOT_IN_A_NAME.sub("-", str(name))[:63]}


def bisection_ends(change: Mapping[str, Any], points: Sequence[Point]) -> tuple[Point | None, Point]:
    """The points a change point's bisection runs between (`change`: its entry of the
    history's changePoints; `points`: the series): the newest point before it with another
    build (None: none has), and the change point's own."""
    at = next((i for i, p in enumerate(points) if p["run"] == change["run"]), None)
    after = points[at] if at is not None else {"run": change["run"], "side": "", "software":
                                                  change.get("software", "")}
    before = next((p for p in reversed(points[:at or 0])
                   if p.get("software") != after.get("software")), None)
    return before, after


def bisection_draft(key: SeriesKey, before: Point | None, after: Point,
                    runs: Mapping[str, Mapping[str, Any]], *, improvement: bool = False,
                    higher_is_better: bool = True) -> tuple[dict[str, Any], list[str]]:
    """A BenchmarkBisection of `key`'s series from the good point `before` to the bad point
    `after` (`bisection_ends`; `runs`: their runs as read, by "ns/name"), and what a person must
    still give before creating it. A bisection looks for the build that made the metric worse:
    for an `improvement` its higherIsBetter is turned round, so it names the one that made it
    better."""
    todo = []
    if improvement:
        todo.append("this change is an improvement: higherIsBetter is turned round, so the "
                    "first 'bad' build the bisection names is the first one that much better")
    good = _software_of(before, runs) if before else {"name": "last-good"}
    bad = _software_of(after, runs)
    if before is None:
        todo.append("no run before the change point has another build: name the good build")
    for software in (good, bad) if before else (bad,):
        if set(software) == {"name"}:
            todo.append(f"build {software['name']} was the board's own image: give its files "
                        "(kernel, initrd, dtb) or its bootArgs")
    todo.append("list the builds between them in order before the last (or give a template and "
                "its revisions)")
    name = "bisect-" + str(after["run"]).rsplit("/", 1)[-1]
    spec: dict[str, Any] = {"metric": key.metric, "plan": key.plan,
                            "selector": {"deviceType": key.device_type}}
    if improvement:
        spec["higherIsBetter"] = not higher_is_better
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkBisection",
            "metadata": {"name": name[:63].rstrip("-."), "namespace": key.namespace},
            "spec": {**spec, "good": good, "builds": [bad]}}, todo
