"""What a command reads of the person's kubeconfig: the current namespace, and an object named
the way kubectl names it (NAMESPACE/NAME, or NAME in that namespace).
"""

from __future__ import annotations

from kubernetes import config

from benchfarm.settings import Settings


def current_namespace(settings: Settings) -> str:
    """The kubeconfig's current namespace ("default" in-cluster or without a context)."""
    try:
        _, current = config.list_kube_config_contexts(settings.kubeconfig or None)
        return str(current.get("context", {}).get("namespace") or "default")
    except (config.ConfigException, OSError):   # in-cluster or no context: the default namespace
        return "default"


def object_ref(settings: Settings, ref: str) -> tuple[str, str]:
    """NAMESPACE/NAME, or NAME in the kubeconfig's current namespace (as kubectl reads it)."""
    ns, sep, name = ref.partition("/")
    return (ns, name) if sep else (current_namespace(settings), ref)
