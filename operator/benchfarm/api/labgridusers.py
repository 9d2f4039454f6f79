"""Who a BoardLease's labgrid user may be: the person who created the lease, as labgrid spells
that person's Kubernetes user name.

A lease's `spec.user` ("host/name", LG_HOSTNAME/LG_USERNAME) is the name the operator allows on
the place and issues a certificate for; labgrid trusts it for "acquired by me". So it cannot be
the person's free choice: the API server (a ValidatingAdmissionPolicy, `api.crdgen`) refuses a
lease whose `name` is not the creator's Kubernetes user name as `labgrid_name` writes it, and any
`host` of the lab's own (`benchfarm/run-<uid>`, `benchfarm/lease-<uid>`: the holders
`labgrid-client places` shows). `host` stays the person's (their machine). `benchfarm lease`
computes the same name from the kubeconfig's identity (a SelfSubjectReview).

`labgrid_name` is one-to-one: characters labgrid allows in a name stay, `_` is doubled and the
few others Kubernetes user names carry become `_` and a letter (`ESCAPES`), so two people never
map to one name (`alice@example.com` -> `alice_aexample.com`, the ServiceAccount
`system:serviceaccount:team-a:ci` -> `system_cserviceaccount_cteam-a_cci`). A user name with any
other character, or not starting with a letter or digit, has no labgrid name: it cannot lease.
The CEL of the policy (`cel_labgrid_name`) is the same chain of replacements, so the API server
and the CLI agree by construction.
"""

from __future__ import annotations

import re

#: labgrid hosts that are the lab's own: sessions, leases, health checks, `benchfarm check`
#: (`benchfarm/...`) and the operator (`operator/...`); no person's lease may name one
LAB_HOSTS = ("benchfarm", "operator")
#: what one part of a labgrid user may be (the `LabgridUser` pattern's halves)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: replaced in this order: `_` first, so the escapes' own `_` are never doubled
ESCAPES = (("_", "__"), (":", "_c"), ("@", "_a"), ("/", "_s"), ("+", "_p"), ("#", "_h"),
           ("=", "_e"), ("~", "_t"), ("%", "_r"))
_NAME = re.compile(NAME_PATTERN)


def labgrid_name(username: str) -> str | None:
    """The labgrid name (LG_USERNAME) of Kubernetes user `username`, or None if it has none."""
    name = username
    for old, new in ESCAPES:
        name = name.replace(old, new)
    return name if _NAME.match(name) else None


def lab_host(user: str) -> bool:
    """Is `user` ("host/name") one of the lab's own identities (its host the lab's)?"""
    return user.partition("/")[0].lower() in LAB_HOSTS


def user_problem(user: str, username: str | None) -> str | None:
    """Why Kubernetes user `username` may not lease as labgrid user `user`, or None. `username`
    None: only the lab-identity check (the operator, which never sees who created a lease)."""
    host, _, name = user.partition("/")
    if lab_host(user):
        return (f"spec.user {user!r}: {host}/... is the lab's own labgrid identity (its runs', "
                f"leases' and health checks'); use your own machine's name as the host")
    if username is None:
        return None
    mine = labgrid_name(username)
    if mine is None:
        return (f"Kubernetes user {username!r} has no labgrid name (letters, digits, '.', '-', "
                f"'_' and {' '.join(c for c, _ in ESCAPES[1:])} only, starting with a letter or "
                "digit): it cannot lease a board")
    if name != mine:
        return (f"spec.user {user!r}: a lease's labgrid user is its creator's own: "
                f"<host>/{mine} for Kubernetes user {username!r}")
    return None


def cel_labgrid_name(username: str) -> str:
    """`labgrid_name` as a CEL expression over the CEL string `username` (unchecked: the caller
    matches the result against NAME_PATTERN)."""
    out = username
    for old, new in ESCAPES:
        out += f".replace('{old}', '{new}')"
    return out
