"""What every custom resource of benchfarm shares: its API group and version, the base of its
models (`Model`: unknown fields refused), the names and labels it uses, a status's conditions
(`Condition`), a status read as leniently as a dict (`Status`), and the ConfigMap the queue's
turn order is kept in. No I/O.

The models are the single source of truth: the CRDs in `crds/` are generated from them
(`api.crdgen`; a test fails when the committed files drift), and the operator validates every
object it reads through them: a BenchmarkRun's in `api.runs`, a Board's in `api.boards`, the
LabPolicy in `api.labpolicy`, a BoardLease in `api.leases` (a campaign's, a Notification's and
a device type's in theirs).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger("benchfarm")

GROUP = "benchfarm.io"
VERSION = "v1alpha1"

Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
LabelKey = Annotated[str, Field(max_length=63)]
LabelValue = Annotated[str, Field(max_length=63)]
ParamValue = Annotated[str, Field(max_length=256)]


class Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


def immutable(message: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": message}]}


# What the operator writes and the dashboard reads besides the objects' fields: who was served
# last per namespace (the queue's turn order) is the ConfigMap FAIRNESS_CONFIG_MAP in the
# operator's namespace, key FAIRNESS_KEY: JSON {namespace: seconds since the epoch}.
FAIRNESS_CONFIG_MAP = "benchfarm-fairness"
FAIRNESS_KEY = "lastServed"

# path segments that cannot start with "." (so no "." or ".." segments), no leading "/"
PATH_SEGMENT = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"


class Condition(Model):
    """One of a status's conditions (Kubernetes' form); fields another writer added are kept."""

    model_config = ConfigDict(extra="allow")
    type: str
    status: str
    reason: str = ""
    message: str = ""
    lastTransitionTime: str | None = None
    observedGeneration: int | None = None


# A status is written by the operator, by sessions and, for a tenant's own objects, by anyone with
# the status subresource: a missing status, a partial one, fields of another benchfarm version and
# fields that are not what the model says must all read (as defaults), never raise in a
# scheduling round that serves every run. Writes are typed where they are built
# (`core.scheduling.transitions`); reads go through the same models (`BenchmarkRunStatus`,
# `BoardLeaseStatus`, `BenchmarkCampaignStatus`, `BenchmarkBisectionStatus`,
# `NotificationStatus`), each a `Status`.

class Status(BaseModel):
    """A resource's status: unknown fields kept (`extra="allow"`), every field optional."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    @classmethod
    def of(cls, status: Mapping[str, Any] | None) -> Self:
        """`status` (an object's `status`, None when it has none) as this model. A field that
        does not validate (someone else wrote it) reads as its default, logged: as a dict read
        skips what it does not understand."""
        raw = dict(status) if isinstance(status, Mapping) else {}
        while True:
            try:
                return cls.model_validate(raw)
            except ValidationError as exc:
                bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]} & raw.keys()
                if not bad:
                    return cls()
                log.warning("%s: ignoring status fields that are not what benchfarm writes: %s",
                            cls.__name__, ", ".join(sorted(bad)))
                for key in bad:
                    del raw[key]
