"""A team's CI on the real stack, as docs/howto/ci.md sets it up: a ServiceAccount `ci` of the
team's namespace with what the chart's `benchfarm-user` role grants there (BenchmarkRuns, and
`get` on the one Secret `benchfarm-store`), a kubeconfig with its own token whose context is the
team's namespace, and an environment with nothing else: no BENCHFARM_* variable at all, none of
the lab admin's keys. The stack test of the CI recipe (tests/stack/test_tenant_store.py) and the
misuse table (tests/misuse) use it; `store()` is the namespace's own store credential, as the
CLI reads it, to try what that credential reaches.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

import benchfarm_devlab as devlab
from benchfarm_devlab.lab import LAB_POLICY, apply_lab_policy
from tests.stack.conftest import apply, wait_for

KUBECTL = devlab.CACHE / "bin" / f"kubernetes-{devlab.K8S_VERSION}" / "kubectl"
# the namespaced rules of helm/benchfarm/templates/roles.yaml's <release>-user
USER_RULES = [
    {"apiGroups": ["benchfarm.io"],
     "resources": ["benchmarkruns", "benchmarkcampaigns", "boardleases", "notifications"],
     "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["benchfarm-store"],
     "verbs": ["get"]}]


def let_in(*entries: dict[str, Any]) -> None:
    """The lab's LabPolicy with these namespaces' entries too (the lab admin letting teams in);
    `apply_lab_policy()` puts it back."""
    apply(yaml.safe_dump({**LAB_POLICY, "spec": {**LAB_POLICY["spec"], "namespaces": [
        *LAB_POLICY["spec"]["namespaces"], *entries]}}))


class CiTenant:
    """The CI of namespace `ns`: its kubeconfig at `workdir/kubeconfig`."""

    def __init__(self, ns: str, workdir: Path) -> None:
        self.ns, self.workdir = ns, workdir
        apply(yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "ci", "namespace": ns}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "benchfarm-user", "namespace": ns}, "rules": USER_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "ci", "namespace": ns},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": "benchfarm-user"},
             "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": ns}]}]))
        token = devlab.kubectl("create", "token", "ci", "-n", ns, "--duration", "1h",
                               capture=True).stdout.strip()
        workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = workdir / "kubeconfig"
        devlab.write_kubeconfig(self.kubeconfig, token, f"system:serviceaccount:{ns}:ci")
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        cfg["contexts"][0]["context"]["namespace"] = ns      # the team's own, as a CI's is
        self.kubeconfig.write_text(yaml.safe_dump(cfg))

    def env(self, **extra: str) -> dict[str, str]:
        """All the CI job has: a PATH with benchfarm, a home, its kubeconfig."""
        env = {"PATH": f"{devlab.VENV_BIN}:/usr/bin:/bin", "HOME": str(self.workdir),
               "KUBECONFIG": str(self.kubeconfig), **extra}
        assert not any(k.startswith("BENCHFARM_") for k in env), env
        return env

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(KUBECTL), *args], env=self.env(), text=True,
                              capture_output=True, timeout=60)

    def secret(self) -> dict[str, str] | None:
        """The namespace's Secret benchfarm-store as the CI reads it (None: not there yet)."""
        res = self.kubectl("get", "secret", "benchfarm-store", "-o", "json")
        if res.returncode != 0:
            assert "NotFound" in res.stderr, res.stderr
            return None
        data = json.loads(res.stdout)["data"]
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def wait_for_credential(self, timeout: float = 90) -> dict[str, str]:
        return wait_for(f"the store credential of {self.ns}", self.secret, timeout=timeout,
                        every=1)

    def store(self) -> Any:
        """A plain S3 client with the namespace's own credential (what `benchfarm upload` uses)."""
        from minio import Minio
        s = self.wait_for_credential()
        return Minio(s["endpoint"], access_key=s["accessKey"], secret_key=s["secretKey"],
                     secure=s["secure"] == "true")


def denied(fn: Any) -> str:
    """What the store answered: its S3 error code, or "allowed" when it did it."""
    from minio.error import S3Error
    try:
        fn()
    except S3Error as exc:
        return str(exc.code)
    return "allowed"


__all__ = ["CiTenant", "apply_lab_policy", "denied", "let_in"]
