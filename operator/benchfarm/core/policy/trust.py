"""The operator's signature on what a session executes.

A session runs the suites in its run's `status.resolvedSuites`, which the operator wrote at
admission after checking them against the plan and the LabPolicy. Whoever may write
`benchmarkruns/status` could rewrite them afterwards (a tenant's extra RBAC, a careless role), so
the operator signs them: HMAC-SHA256 over the run's uid and the canonical JSON of the suites, with
a key only the operator and its sessions hold (BENCHFARM_SIGNING_KEY; in a cluster a Secret in the
operator's namespace). The session runs nothing whose signature does not verify. The uid binds a
signature to its run: copied onto another run, it does not verify. (`plan_digest`, beside it,
only names a plan: the operator at admission and the session in its provenance.)

The same key signs the grant that gives a warm session pod its run (`api.grants`): the pod runs
only a grant signed for its own slot, so whoever may write ConfigMaps in the operator's namespace
still cannot point a waiting pod at another run or board. And it signs a run's go-ahead
(`api.grants.GoAhead`): a session on standby takes its board only on the operator's word.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from benchfarm.api.grants import GRANT_KEY, SIGNATURE_KEY, GoAhead, Relay, SessionGrant
from benchfarm.api.runs import SuiteSpec

KEY_ENV = "BENCHFARM_SIGNING_KEY"
MIN_KEY_BYTES = 16


def key_from(secret: str) -> bytes:
    """The signing key from its setting (`Settings.signing_key`); ValueError when it is missing
    or too short."""
    key = secret.encode()
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{KEY_ENV} must hold a secret of at least {MIN_KEY_BYTES} bytes "
                         "(the operator signs the suites its sessions run with it)")
    return key


def plan_digest(suites: list[SuiteSpec]) -> str:
    """What a run's plan was, as its provenance and its admission name it (not a signature)."""
    body = json.dumps([s.model_dump() for s in suites], sort_keys=True)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def _canonical(value: Any) -> Any:
    """`value` as it reads back from the API server: a whole float is an integer there (its
    JSON decoding makes 100000.0 the integer 100000) and a null field is no field. Signed and
    verified in this form, a plan's envelope (`minFrequencyMHz: 1000.0`) verifies after the
    round trip; what it means is the same, so nothing a tenant could change hides in it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _message(uid: str, suites: list[dict[str, Any]]) -> bytes:
    canonical = json.dumps(_canonical(suites), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return f"{uid}\n{canonical}".encode()


def sign(key: bytes, uid: str, suites: list[dict[str, Any]]) -> str:
    return hmac.new(key, _message(uid, suites), hashlib.sha256).hexdigest()


def verify(key: bytes, uid: str, suites: Any, signature: Any) -> bool:
    """Did the operator sign exactly these suites for this run?"""
    if not isinstance(suites, list) or not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign(key, uid, suites), signature)


def sign_text(key: bytes, purpose: str, text: str) -> str:
    """A signature over a document (a warm session's grant) for one purpose only: a signature
    made for one purpose never verifies for another, nor for the suites."""
    return hmac.new(key, f"{purpose}\0{text}".encode(), hashlib.sha256).hexdigest()


def verify_text(key: bytes, purpose: str, text: Any, signature: Any) -> bool:
    if not isinstance(text, str) or not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign_text(key, purpose, text), signature)


GRANT_PURPOSE = "session-grant"
LEASE_PURPOSE = "board-lease"      # a BoardLease's grant: its place, phase, expiry (operator.leases.keeper)
GO_AHEAD_PURPOSE = "go-ahead"      # a run's go-ahead: its session may take its board now


# what a BoardLease's `status.grantSignature` covers of its status: every field the operator
# (and the lease's end session) acts on
LEASE_SIGNED = ("phase", "place", "grantedAt", "expiresAt")


def lease_grant_text(uid: str, user: Any, status: Mapping[str, Any]) -> str:
    """What a BoardLease grant's signature covers: the lease (uid), the person's labgrid user
    it was given to (`spec.user`) and the status fields it is trusted for (`LEASE_SIGNED`:
    phase, place, grant and expiry). Only the operator gives a lease a place, a phase or an
    end: a status written by anyone else (a new expiry, Granted again, another board) moves
    no board and keeps none."""
    return "\0".join([uid, str(user), *(str(status.get(f) or "") for f in LEASE_SIGNED)])


def sign_lease(key: bytes, uid: str, user: Any, status: Mapping[str, Any]) -> str:
    """`status.grantSignature` for a lease whose status will hold `status`'s signed fields."""
    return sign_text(key, LEASE_PURPOSE, lease_grant_text(uid, user, status))


def lease_trusted(key: bytes, uid: str, user: Any, status: Mapping[str, Any]) -> bool:
    """Did the operator sign this lease status's phase, place, grant and expiry, for this
    lease and its user?"""
    return verify_text(key, LEASE_PURPOSE, lease_grant_text(uid, user, status),
                       status.get("grantSignature"))


def sign_grant(key: bytes, grant: SessionGrant) -> dict[str, str]:
    """A warm slot's ConfigMap data (`operator.launch.warm`): the grant and its signature."""
    text = grant.model_dump_json()
    return {GRANT_KEY: text, SIGNATURE_KEY: sign_text(key, GRANT_PURPOSE, text)}


def read_grant(key: bytes, slot: str, data: Mapping[str, str] | None) -> SessionGrant | None:
    """The grant in a slot ConfigMap's data if the operator signed it for this slot, else None."""
    data = data or {}
    text = data.get(GRANT_KEY)
    if not verify_text(key, GRANT_PURPOSE, text, data.get(SIGNATURE_KEY)):
        return None
    grant = SessionGrant.model_validate_json(str(text))
    return grant if grant.slot == slot else None


def _go_ahead_text(uid: str, attempt: int, after: Relay | None = None) -> str:
    text = f"{uid}\0{attempt}"
    return text if after is None else f"{text}\0{after.place}\0{after.holder}"


def sign_go_ahead(key: bytes, uid: str, attempt: int,
                  after: Relay | None = None) -> dict[str, Any]:
    """`status.goAhead` for this attempt of this run: at once, or `after` a seat's holder
    releases its place (`api.grants.Relay`)."""
    return GoAhead(attempt=attempt, after=after, signature=sign_text(
        key, GO_AHEAD_PURPOSE, _go_ahead_text(uid, attempt, after))).model_dump()


def read_go_ahead(key: bytes, uid: str, attempt: int, raw: Any) -> GoAhead | None:
    """`status.goAhead` (as read: `BenchmarkRunStatus.goAhead`, or the raw dict) if the operator
    signed it for this attempt of this run, else None."""
    if isinstance(raw, GoAhead):
        go = raw
    elif not isinstance(raw, dict):
        return None
    else:
        try:
            go = GoAhead.model_validate(raw)
        except ValidationError:
            return None
    if go.attempt != attempt:
        return None
    text = _go_ahead_text(uid, attempt, go.after)
    return go if verify_text(key, GO_AHEAD_PURPOSE, text, go.signature) else None


def has_go_ahead(key: bytes, uid: str, attempt: int, raw: Any) -> bool:
    """Does `status.goAhead` hold the operator's go-ahead for this attempt of this run, to take
    its board now (not a relay that waits for another session's seat)?"""
    go = read_go_ahead(key, uid, attempt, raw)
    return go is not None and go.after is None
