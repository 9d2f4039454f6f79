"""What the API server said when it refused a request: the message of its `Status` (a CEL rule's,
the schema's, an admission policy's), for the condition or the event a person reads when an
object benchfarm made for them (a campaign's run, a bisection's step) was refused.
"""

from __future__ import annotations

import json

from kubernetes.client.rest import ApiException


def api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)
