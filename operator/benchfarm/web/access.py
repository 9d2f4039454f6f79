"""Who is asking, and which namespaces' runs they may see: Kubernetes decides, not the dashboard.

A person signs in with a bearer token (the Authorization header, or the sign-in form's cookie).
The API server reviews it (TokenReview) and answers, per namespace, whether that person may
`get benchmarkruns` there (SubjectAccessReview). The dashboard's own account reads the objects;
a person is shown only what their own access would let them read. Answers (the TokenReview's and
the SubjectAccessReviews' together, a token that was refused too) are kept by the token's SHA-256
for a short while (a page makes many requests), never longer than `TTL`, and for at most
`REVIEWS` tokens at once (the least recently used goes first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kubernetes import client

from benchfarm.api.base import GROUP
from benchfarm.web.sessions import Expiring, digest

TTL = 30.0          # seconds a token's review and its namespaces are trusted before asking again
REVIEWS = 4096      # tokens whose answers are kept at once


@dataclass(frozen=True)
class Person:
    name: str
    namespaces: frozenset[str]      # where they may get benchmarkruns
    everywhere: bool = False        # a cluster-wide grant: every namespace, present and future

    def may_read(self, namespace: str) -> bool:
        return self.everywhere or namespace in self.namespaces


class Access:
    def __init__(self, api: client.ApiClient) -> None:
        self.authn = client.AuthenticationV1Api(api)
        self.authz = client.AuthorizationV1Api(api)
        self.core = client.CoreV1Api(api)
        # token hash -> (the answer,): a refused token is kept as (None,), a miss is None
        self._cache: Expiring[str, tuple[Person | None]] = Expiring(REVIEWS, TTL)

    def cached(self, token: str) -> tuple[bool, Person | None]:
        """Whether the token's answer is kept, and that answer: no API call."""
        hit = self._cache.get(digest(token), time.monotonic())
        return (True, hit[0]) if hit is not None else (False, None)

    def person(self, token: str) -> Person | None:
        """The person the token belongs to and what they may read; None for a token the API
        server does not accept."""
        known, found = self.cached(token)
        if known:
            return found
        found = self._review(token)
        self._cache.put(digest(token), (found,), time.monotonic())
        return found

    def _review(self, token: str) -> Person | None:
        review = self.authn.create_token_review(client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token)))
        st = review.status
        if not st or not st.authenticated or not st.user:
            return None
        user = st.user

        def allowed(namespace: str) -> bool:
            sar = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
                user=user.username, groups=user.groups, uid=user.uid, extra=user.extra,
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace or None, verb="get", group=GROUP,
                    resource="benchmarkruns")))
            answer = self.authz.create_subject_access_review(sar).status
            return bool(answer and answer.allowed)

        name = user.username or ""
        if allowed(""):
            return Person(name, frozenset(), everywhere=True)
        names = [str(n.metadata.name) for n in self.core.list_namespace().items if n.metadata]
        return Person(name, frozenset(n for n in names if allowed(n)))
