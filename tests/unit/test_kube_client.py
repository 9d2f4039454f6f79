"""The API client finds the cluster KUBECONFIG names when the client is made, not when the
kubernetes package was imported (it reads KUBECONFIG once, at import)."""

from __future__ import annotations

import kubernetes  # noqa: F401  (imported first, as in any process that set KUBECONFIG later)
import yaml

from benchfarm.kubeapi.client import Kube
from benchfarm.settings import Settings


def _kubeconfig(tmp_path, monkeypatch) -> None:
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "lab",
           "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:26443",
                                                     "insecure-skip-tls-verify": True}}],
           "users": [{"name": "u", "user": {"token": "t"}}],
           "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config to fall back on
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_kubeconfig_set_after_import_is_used(tmp_path, monkeypatch):
    _kubeconfig(tmp_path, monkeypatch)
    assert Kube(Settings.from_env()).api.configuration.host == "https://127.0.0.1:26443"


def test_the_connection_pool_keeps_a_connection_per_calling_thread(tmp_path, monkeypatch):
    """The pool the requests use, not only the setting: more threads than the client's default
    (5 a CPU) discarded connections, each a new TLS handshake later."""
    from benchfarm.kubeapi.client import POOL_SIZE
    _kubeconfig(tmp_path, monkeypatch)
    pool = Kube(Settings.from_env()).api.rest_client.pool_manager.connection_from_host("127.0.0.1", 26443, "https")
    assert pool.pool.maxsize == POOL_SIZE > 5 * 2


def _calls_in_source() -> dict[str, set[str]]:
    """The client methods benchfarm.kubeapi calls, read from its source, by API class."""
    import re
    from pathlib import Path

    import benchfarm.kubeapi as pkg
    root = Path(pkg.__file__).parent
    found: dict[str, set[str]] = {"CustomObjectsApi": set(), "CoreV1Api": set(),
                                  "CoordinationV1Api": set()}
    for path in root.glob("*.py"):
        text = path.read_text()
        found["CustomObjectsApi"] |= set(re.findall(r"\.custom\.([a-z_]+)\(", text))
        found["CoreV1Api"] |= set(re.findall(r"\.core\.([a-z_]+)\(", text))
        found["CoordinationV1Api"] |= set(re.findall(r"\bapi\.([a-z_]*lease[a-z_]*)\(", text))
    return found


def test_the_methods_prebuilt_are_the_methods_called():
    from kubernetes import client

    from benchfarm.kubeapi.client import CALLS
    called = _calls_in_source()
    assert all(called.values()), called          # the reading of the source found calls
    assert {cls: set(names) for cls, names in CALLS.items()} == called
    for cls, names in CALLS.items():
        for name in names:
            assert callable(getattr(getattr(client, cls), name, None)), f"{cls}.{name}"


def test_prebuild_builds_every_validator_without_a_request():
    """Each method is called with an argument it does not have: its validator must refuse that
    before anything reaches the network (an AttributeError on None, or a request, would escape
    here)."""
    from kubernetes import client
    from pydantic import ValidationError

    from benchfarm.kubeapi.client import CALLS, prebuild
    prebuild()
    cls, name = next(iter(CALLS.items()))
    try:
        getattr(getattr(client, cls), name[0])(None, benchfarm_prebuild=True)
    except ValidationError as exc:
        assert "unexpected_keyword_argument" in str(exc)
    else:
        raise AssertionError("a call without arguments passed validation")
