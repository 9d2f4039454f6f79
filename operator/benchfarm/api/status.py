"""Reading a custom resource's `status` through its pydantic model, as leniently as a dict.

Writes are typed where they are built (`core.scheduling.transitions`); reads go through the same
models (`BenchmarkRunStatus`, `BoardLeaseStatus`, `BenchmarkCampaignStatus`,
`NotificationStatus`), each a `Status`. A status is written by the operator, by sessions and, for
a tenant's own objects, by anyone with the status subresource: a missing status, a partial one,
fields of another benchfarm version and fields that are not what the model says must all read
(as defaults), never raise in a scheduling round that serves every run. No I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError

log = logging.getLogger("benchfarm")


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
