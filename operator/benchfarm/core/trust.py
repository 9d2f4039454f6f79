"""The operator's signature on what a session executes.

A session runs the suites in its run's `status.resolvedSuites`, which the operator wrote at
admission after checking them against the plan and the LabPolicy. Whoever may write
`benchmarkruns/status` could rewrite them afterwards (a tenant's extra RBAC, a careless role), so
the operator signs them: HMAC-SHA256 over the run's uid and the canonical JSON of the suites, with
a key only the operator and its sessions hold (BENCHFARM_SIGNING_KEY; in a cluster a Secret in the
operator's namespace). The session runs nothing whose signature does not verify. The uid binds a
signature to its run: copied onto another run, it does not verify. (`plan_digest`, beside it,
only names a plan: the operator at admission and the session in its provenance.)
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from ..api.models import SuiteSpec

KEY_ENV = "BENCHFARM_SIGNING_KEY"
MIN_KEY_BYTES = 16


def key_from(environ: Mapping[str, str]) -> bytes:
    """The signing key from an environment; ValueError when it is missing or too short."""
    key = environ.get(KEY_ENV, "").encode()
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{KEY_ENV} must hold a secret of at least {MIN_KEY_BYTES} bytes "
                         "(the operator signs the suites its sessions run with it)")
    return key


def plan_digest(suites: list[SuiteSpec]) -> str:
    """What a run's plan was, as its provenance and its admission name it (not a signature)."""
    body = json.dumps([s.model_dump() for s in suites], sort_keys=True)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def _message(uid: str, suites: list[dict[str, Any]]) -> bytes:
    canonical = json.dumps(suites, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{uid}\n{canonical}".encode()


def sign(key: bytes, uid: str, suites: list[dict[str, Any]]) -> str:
    return hmac.new(key, _message(uid, suites), hashlib.sha256).hexdigest()


def verify(key: bytes, uid: str, suites: Any, signature: Any) -> bool:
    """Did the operator sign exactly these suites for this run?"""
    if not isinstance(suites, list) or not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign(key, uid, suites), signature)
