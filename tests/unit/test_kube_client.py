"""The API client finds the cluster KUBECONFIG names when the client is made, not when the
kubernetes package was imported (it reads KUBECONFIG once, at import)."""

from __future__ import annotations

import kubernetes  # noqa: F401  (imported first, as in any process that set KUBECONFIG later)
import yaml

from benchfarm.kubeapi.client import Kube


def test_kubeconfig_set_after_import_is_used(tmp_path, monkeypatch):
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
    assert Kube().api.configuration.host == "https://127.0.0.1:26443"
