"""`benchfarm history` and `benchfarm results …`: the results database's commands
(`benchfarm.history.commands`), each shown only the namespaces its caller may read.

Who may read a namespace's runs is the API server's to say, and the history package knows no
Kubernetes: `history_scope` asks it (a SelfSubjectAccessReview for `get benchmarkruns`) and is
the scope the history commands are registered with.
"""

from __future__ import annotations

from typing import Any

from benchfarm.settings import Settings


def add_parsers(sub: Any) -> None:
    from benchfarm.history.commands import register
    register(sub, history_scope)


def history_scope(namespace: str | None, everywhere: bool,
                  settings: Settings) -> frozenset[str] | None:
    """The namespaces `benchfarm history`/`results series` show: `-n` or the kubeconfig's
    current namespace, or every one (None) with --all-namespaces, after the API server said
    (SelfSubjectAccessReview) that the caller may `get benchmarkruns` there (cluster-wide for
    every namespace). Without any Kubernetes credentials there is no one to ask: the database URL
    is then the caller's only credential, and it reads everything anyway."""
    from benchfarm.history.commands import ScopeRefused
    from benchfarm.kubeapi.client import WATCH_FAILURES
    from benchfarm.kubeapi.kubeconfig import current_namespace
    ns = None if everywhere else namespace or current_namespace(settings)
    from kubernetes import client, config
    try:
        try:
            config.load_kube_config(settings.kubeconfig or None)
        except (config.ConfigException, OSError):
            config.load_incluster_config()
    except (config.ConfigException, OSError):   # no kubeconfig, not in a cluster: nobody to ask
        return None if ns is None else frozenset({ns})
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(
            namespace=ns, verb="get", group="benchfarm.io", resource="benchmarkruns")))
    try:
        answer = client.AuthorizationV1Api().create_self_subject_access_review(review).status
    except WATCH_FAILURES as exc:       # refused, or the API server away (no `Kube._call` here)
        raise ScopeRefused(f"could not ask the API server who may read "
                           f"{'every namespace' if ns is None else ns}: "
                           f"{type(exc).__name__}") from exc
    if not (answer and answer.allowed):
        raise ScopeRefused(
            "--all-namespaces is a lab admin's (get benchmarkruns cluster-wide); you may not"
            if ns is None else f"you may not read the runs of namespace {ns}")
    return None if ns is None else frozenset({ns})
