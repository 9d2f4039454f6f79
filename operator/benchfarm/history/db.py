"""The results database: connecting, migrating, upserting a run's rows, reading a series.

A URL as `BENCHFARM_DATABASE_URL` gives it (`postgresql://user:password@host:port/db`; psycopg 3
drives it). A series is one namespace's (`Series`): every read names the namespaces it may
see. Any failure to reach the server is an `Outage(party=Party.database)`: the operator's
indexer waits it out and catches up, nothing a run does waits for it.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from benchfarm.api.outcomes import LabFault
from benchfarm.errors import InfraError, Outage, Party
from benchfarm.history.schema import change_points, metadata, results, run_conditions
from benchfarm.settings import Settings

T = TypeVar("T")
Series = tuple[str, str, str, str]      # (namespace, metric, device type, plan): one namespace's
MIGRATIONS = Path(__file__).with_name("migrations")
_ROW_COLUMNS = [c.name for c in results.columns]
_CONDITIONS_COLUMNS = [c.name for c in run_conditions.columns]


def sqlalchemy_url(url: str) -> str:
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme):]
    return url


class Database:
    def __init__(self, url: str, *, connect_timeout: int = 3) -> None:
        self.url = url
        self.engine: Engine = create_engine(
            sqlalchemy_url(url), pool_pre_ping=True, pool_size=2, max_overflow=2,
            connect_args={"connect_timeout": connect_timeout})
        self.migrated = False
        self.migrating = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        """The results database the settings name; InfraError where they name none."""
        url = settings.database_url
        if not url:
            raise InfraError("the results database is not configured: BENCHFARM_DATABASE_URL "
                             "is not set", reason=LabFault.database_not_configured)
        return cls(url)

    def close(self) -> None:
        self.engine.dispose()

    def _do(self, what: str, fn: Callable[[Connection], T]) -> T:
        try:
            with self.engine.begin() as conn:
                return fn(conn)
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, OperationalError) or exc.connection_invalidated:
                raise Outage(f"results database unreachable ({what}): {exc.orig}",
                             party=Party.database, reason=LabFault.database_unreachable) from exc
            raise

    # -- schema -------------------------------------------------------------------------------
    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent)."""
        from alembic import command
        from alembic.config import Config

        def _upgrade(conn: Connection) -> None:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        self._do("migrate", _upgrade)

    def ensure_migrated(self) -> None:
        """`migrate` once per process, whichever of its users (the indexer, the notifier) comes
        first; the others wait for it rather than race it."""
        with self.migrating:
            if not self.migrated:
                self.migrate()
                self.migrated = True

    def drop(self) -> None:
        """Every table of the index (and Alembic's version): what `results reindex --drop` and
        the tests start from."""
        def _drop(conn: Connection) -> None:
            metadata.drop_all(conn)
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
        self._do("drop", _drop)

    # -- writing ------------------------------------------------------------------------------
    def upsert(self, rows: Sequence[dict[str, Any]],
               conditions: Sequence[dict[str, Any]] = ()) -> int:
        """Insert or replace rows by (run uid, side, metric), and what the run's steps were
        measured under (`run_conditions` rows, by run uid, side and step), in one transaction:
        indexing twice changes nothing. The number of result rows."""
        if not rows:
            return 0
        stmt = insert(results)
        stmt = stmt.on_conflict_do_update(
            constraint="results_pkey",
            set_={c: stmt.excluded[c] for c in _ROW_COLUMNS
                  if c not in ("run_uid", "side", "metric")})
        cond = insert(run_conditions)
        cond = cond.on_conflict_do_update(
            constraint="run_conditions_pkey",
            set_={c: cond.excluded[c] for c in _CONDITIONS_COLUMNS
                  if c not in ("run_uid", "side", "step")})

        def _write(conn: Connection) -> None:
            conn.execute(stmt, list(rows))
            if conditions:
                conn.execute(cond, list(conditions))
        self._do("index", _write)
        return len(rows)

    def forget_run(self, uid: str) -> None:
        def _forget(conn: Connection) -> None:
            conn.execute(delete(results).where(results.c.run_uid == uid))
            conn.execute(delete(run_conditions).where(run_conditions.c.run_uid == uid))
        self._do("forget", _forget)

    def record_points(self, points: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Remember change points; returns those not known before (the new ones)."""
        now = dt.datetime.now(dt.UTC)
        rows = [{**p, "reported": now} for p in points]
        if not rows:
            return []

        def _insert(conn: Connection) -> list[dict[str, Any]]:
            c = change_points.c
            stmt = insert(change_points).on_conflict_do_nothing().returning(
                c.namespace, c.metric, c.device_type, c.plan, c.run_uid)
            new = {tuple(r) for r in conn.execute(stmt, rows)}
            return [r for r in rows if (r["namespace"], r["metric"], r["device_type"],
                                        r["plan"], r["run_uid"]) in new]
        return self._do("record change points", _insert)

    # -- reading ------------------------------------------------------------------------------
    def ping(self) -> None:
        """The cheapest question the server answers: Outage when it does not."""
        self._do("ping", lambda conn: conn.execute(text("SELECT 1")).scalar())

    def indexed_uids(self) -> set[str]:
        return self._do("read", lambda conn: {r[0] for r in conn.execute(
            select(results.c.run_uid).distinct())})

    def series_rows(self, namespace: str, metric: str, device_type: str, plan: str,
                    since: dt.datetime | None = None) -> list[dict[str, Any]]:
        """One namespace's runs of the series, oldest first: never another namespace's."""
        c = results.c
        q = (select(c.run_uid, c.side, c.namespace, c.name, c.time, c.software, c.kernel_release,
                    c.board, c.mean, c.samples, c.unit, c.higher_is_better)
             .where(c.namespace == namespace, c.metric == metric, c.device_type == device_type,
                    c.plan == plan)
             .order_by(c.time, c.run_uid, c.side))
        if since is not None:
            q = q.where(c.time >= since)
        return self._do("read", lambda conn: [dict(r._mapping) for r in conn.execute(q)])

    def step_conditions(self, step: str, runs: Iterable[tuple[str, str]]
                        ) -> dict[tuple[str, str], dict[str, Any]]:
        """What `step` of each of `runs` ((run uid, side) pairs) was measured under: its
        `run_conditions` row by (run uid, side); runs that recorded none are absent."""
        wanted = set(runs)
        if not wanted:
            return {}
        c = run_conditions.c
        q = select(run_conditions).where(c.step == step,
                                         c.run_uid.in_(sorted({u for u, _ in wanted})))
        return self._do("read", lambda conn: {
            (r.run_uid, r.side): dict(r._mapping) for r in conn.execute(q)
            if (r.run_uid, r.side) in wanted})

    def run_series(self, uid: str) -> list[Series]:
        """The (namespace, metric, device type, plan) series one run has rows in."""
        c = results.c
        q = select(c.namespace, c.metric, c.device_type, c.plan).where(c.run_uid == uid).distinct()
        return self._do("read", lambda conn: [(n, m, d, p) for n, m, d, p in conn.execute(q)])

    def series_keys(self, namespaces: Iterable[str] | None) -> list[Series]:
        """Every (namespace, metric, device type, plan) there is, of `namespaces` only (None:
        every namespace: a lab admin's view), read by skipping through the series index one key
        at a time (a recursive CTE, PostgreSQL's loose index scan): as many index probes as there
        are series, however many rows each has. `known_series` counts rows; this is what a page
        that only offers the series to choose from needs."""
        if namespaces is None:
            return self._do("read", lambda conn: [
                (n, m, d, p) for n, m, d, p in conn.execute(_SKIP_SCAN_ALL)])
        wanted = sorted(set(namespaces))
        return self._do("read", lambda conn: [
            (n, m, d, p) for ns in wanted
            for n, m, d, p in conn.execute(_SKIP_SCAN_NAMESPACE, {"ns": ns})])

    def known_series(self, namespaces: Iterable[str] | None) -> list[dict[str, Any]]:
        """The series of `namespaces` (None: all) with their unit, direction, runs and last run."""
        c = results.c
        q = (select(c.namespace, c.metric, c.device_type, c.plan, func.min(c.unit),
                    func.bool_and(c.higher_is_better), func.count(func.distinct(c.run_uid)),
                    func.max(c.time))
             .group_by(c.namespace, c.metric, c.device_type, c.plan)
             .order_by(c.namespace, c.device_type, c.plan, c.metric))
        if namespaces is not None:
            q = q.where(c.namespace.in_(sorted(set(namespaces))))
        return self._do("read", lambda conn: [
            {"namespace": ns, "metric": m, "deviceType": d, "plan": p, "unit": u,
             "higherIsBetter": h, "runs": n, "last": t.isoformat() if t else None}
            for ns, m, d, p, u, h, n, t in conn.execute(q)])


# The skip scans of `series_keys` over the index results_ns_series: every series, or one
# namespace's (the namespace fixed, the rest skipped through).
_SKIP_SCAN_ALL = text("""
    WITH RECURSIVE k AS (
      (SELECT namespace, metric, device_type, plan FROM results
        ORDER BY namespace, metric, device_type, plan LIMIT 1)
      UNION ALL
      SELECT n.namespace, n.metric, n.device_type, n.plan FROM k, LATERAL (
        SELECT namespace, metric, device_type, plan FROM results r
         WHERE (r.namespace, r.metric, r.device_type, r.plan)
             > (k.namespace, k.metric, k.device_type, k.plan)
         ORDER BY r.namespace, r.metric, r.device_type, r.plan LIMIT 1) n)
    SELECT namespace, metric, device_type, plan FROM k""")
_SKIP_SCAN_NAMESPACE = text("""
    WITH RECURSIVE k AS (
      (SELECT namespace, metric, device_type, plan FROM results WHERE namespace = :ns
        ORDER BY metric, device_type, plan LIMIT 1)
      UNION ALL
      SELECT n.namespace, n.metric, n.device_type, n.plan FROM k, LATERAL (
        SELECT namespace, metric, device_type, plan FROM results r
         WHERE r.namespace = :ns
           AND (r.metric, r.device_type, r.plan) > (k.metric, k.device_type, k.plan)
         ORDER BY r.metric, r.device_type, r.plan LIMIT 1) n)
    SELECT namespace, metric, device_type, plan FROM k""")
