"""Who benchfarm is to labgrid's coordinator: the `host/user` identities its clients acquire
places under (the operator's, each run's session, a BoardLease, a health check, a board-network
audit) and how a holder's name is read back. Pure strings, no labgrid: the operator reads holders
with these without loading labgrid's client.
"""

from __future__ import annotations

# Who benchfarm is to the coordinator: places show as acquired by "<host>/<user>". Each board
# session acquires under its own identity (see `run_identity`), so two sessions never share one.
DEFAULT_USER = "benchfarm"
DEFAULT_HOST = "operator"
SESSION_HOST = "benchfarm"


def run_identity(uid: str) -> tuple[str, str]:
    """(host, user) of the session of the run with this uid, as labgrid shows it: host/user."""
    return SESSION_HOST, f"run-{uid}"


def run_holder(uid: str) -> str:
    """The holder of a place the session of the run with this uid acquired, as labgrid names it."""
    return "/".join(run_identity(uid))


def lease_identity(uid: str) -> tuple[str, str]:
    """(host, user) a BoardLease holds its place under: the lease's own, not the person's (the
    person's labgrid user is allowed on the place); its end session powers off under it too."""
    return SESSION_HOST, f"lease-{uid}"


def lease_uid_of(holder: str | None) -> str | None:
    """The uid of the BoardLease behind a labgrid holder identity, if it is one."""
    prefix = f"{SESSION_HOST}/lease-"
    return holder[len(prefix):] if holder and holder.startswith(prefix) else None


def health_identity(board: str, check: int) -> tuple[str, str]:
    """(host, user) of the session of a board's health check number `check`: each check its
    own, so a check's session that lives on after it was given up holds nothing of the next."""
    return SESSION_HOST, f"health-{check}-{board}"


def health_check_of(holder: str | None) -> tuple[str, int] | None:
    """(board, check) behind a labgrid holder identity of a health check's session, if it is one."""
    prefix = f"{SESSION_HOST}/health-"
    if not holder or not holder.startswith(prefix):
        return None
    check, _, board = holder[len(prefix):].partition("-")
    return (board, int(check)) if check.isdigit() and board else None


def netcheck_identity(host: str, pid: int) -> tuple[str, str]:
    """(host, user) of `benchfarm check --boards` on a board it audits: its own, one per
    process, so the operator knows it for benchfarm's (no DirectLock) and nobody else's."""
    return SESSION_HOST, f"netcheck-{host}-{pid}"


def is_netcheck(holder: str | None) -> bool:
    """Is this labgrid holder a board-network audit (`netcheck_identity`)?"""
    return bool(holder) and str(holder).startswith(f"{SESSION_HOST}/netcheck-")
