"""Results over time: the results database (an index of the store), its series and change points.

Every finished run's metrics.json (the record, in MinIO) becomes one row per (run, side, metric)
in PostgreSQL (`schema`), with every sample, the unit, the direction and the run's identity
(taken from where the document lies in the store, never from the document); `index` builds the
rows and upserts them (indexing a run twice changes nothing), `reindex` rebuilds everything from
the store. A series is one namespace's: `query.history` answers one (namespace, metric, device
type, plan) series with its change points (`core.statistics.changepoints`) in the JSON shape the CLI and the
web page show; `query.known_series` lists the series of the namespaces asked for. Neither the operator's nor a session's
code lives here: the operator calls `index` off kopf's loop, the CLI and the web room call
`query`. The names are imported on first use: the CLI registers its commands without loading
SQLAlchemy (a session never needs it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchfarm.history.db import Database
    from benchfarm.history.query import history, known_series

__all__ = ["Database", "history", "known_series"]


def __getattr__(name: str) -> Any:
    if name == "Database":
        from benchfarm.history.db import Database
        return Database
    if name in ("history", "known_series"):
        from benchfarm.history import query
        return getattr(query, name)
    raise AttributeError(name)
