"""The results database of the embedded lab: Debian's PostgreSQL server as a lab process.

`benchfarm.history` indexes every finished run here (MinIO stays the record). The server is
the `postgresql` package's own binaries (installed by `make deps`), its cluster made with initdb
under `.benchfarm/postgres/`, listening on 127.0.0.1 only, on the port base's port, with its own
role and database `benchfarm` (password in `.benchfarm/postgres/password`, the URL in
`.benchfarm/env` as BENCHFARM_DATABASE_URL). PostgreSQL refuses to run as root: a root lab runs
it as Debian's `postgres` user (setpriv, no fork: the PID file names the server itself).
Durability is traded for speed (fsync off): this database is an index that `benchfarm results
reindex` rebuilds from the store.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from benchfarm_devlab.config import PORTS, STATE, LabError
from benchfarm_devlab.processes import port_open, running_pid, start_process

DATA = STATE / "postgres"
NAME = "postgres"            # the lab component (pid file, log)
USER = DATABASE = "benchfarm"
APT_HINT = "`make deps` installs Debian's postgresql"


def _bin_dir() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if not versions:
        raise LabError(f"PostgreSQL is not installed; {APT_HINT}")
    return versions[-1].parent


def _as_owner() -> list[str]:
    """How to run PostgreSQL's programs: as ourselves, or as `postgres` when we are root."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]


def password() -> str:
    path = DATA / "password"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(24))
    return path.read_text().strip()


def url(database: str = DATABASE) -> str:
    return f"postgresql://{USER}:{password()}@127.0.0.1:{PORTS.postgres}/{database}"


def _initdb(bins: Path) -> Path:
    cluster = DATA / "cluster"
    if (cluster / "PG_VERSION").exists():
        return cluster
    pw = password()
    cluster.mkdir(parents=True, exist_ok=True)
    pwfile = DATA / "initdb-pw"
    pwfile.write_text(pw)
    if os.geteuid() == 0:
        shutil.chown(cluster, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    os.chmod(cluster, 0o700)
    try:
        done = subprocess.run([*_as_owner(), str(bins / "initdb"), "-D", str(cluster), "-U", USER,
                               "--pwfile", str(pwfile), "--auth=scram-sha-256", "-E", "UTF8",
                               "--locale=C.UTF-8"], capture_output=True, text=True)
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode:
        shutil.rmtree(cluster, ignore_errors=True)
        raise LabError(f"postgres: initdb failed: {done.stderr.strip()[-800:]}")
    return cluster


def _ready() -> bool:
    if not port_open(PORTS.postgres):
        return False
    import psycopg
    try:
        with psycopg.connect(url("postgres"), connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def start_postgres() -> None:
    """Start the server unless it runs (initdb on first use) and make the database."""
    bins = _bin_dir()
    cluster = _initdb(bins)
    start_process(NAME, [*_as_owner(), str(bins / "postgres"), "-D", str(cluster),
                         "-c", "listen_addresses=127.0.0.1", "-p", str(PORTS.postgres),
                         "-c", "unix_socket_directories=", "-c", "shared_buffers=64MB",
                         "-c", "fsync=off", "-c", "synchronous_commit=off",
                         "-c", "full_page_writes=off", "-c", "max_connections=50"],
                  ports=[PORTS.postgres], ready=_ready, timeout=60)
    import psycopg
    with psycopg.connect(url("postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                        (DATABASE,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def stop_postgres(timeout: float = 30.0) -> bool:
    """A fast shutdown (SIGINT: clients are disconnected, not waited for), as `lab down` and
    the outage tests want it; the PID file stays, so `lab up` (or start_postgres) restarts it."""
    pid = running_pid(NAME)
    if pid is None:
        return False
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running_pid(NAME) is not None:
        time.sleep(0.1)
    return True
