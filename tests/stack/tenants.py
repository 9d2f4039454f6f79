"""A tenant's person on the real stack: a ServiceAccount of a namespace that may make and read the
namespace's BoardLeases (what the chart's user role gives a person there, no more), and a
kubeconfig with its own token. The lease tests (tests/stack/test_leases.py) and the misuse table
(tests/misuse) lease as such a person, never as the lab admin (who may name anyone).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

import benchfarm_devlab as devlab
from benchfarm.api.labgridusers import labgrid_name
from tests.stack.conftest import apply

ROLE_RULES = [{"apiGroups": ["benchfarm.io"], "resources": ["boardleases"],
               "verbs": ["create", "get", "list", "watch", "patch", "delete"]}]


class Tenant:
    """ServiceAccount `name` of namespace `ns`, its kubeconfig at `dir/kubeconfig`."""

    def __init__(self, ns: str, name: str, workdir: Path) -> None:
        self.ns, self.name = ns, name
        self.username = f"system:serviceaccount:{ns}:{name}"
        self.labgrid = labgrid_name(self.username)
        role = f"lease-person-{name}"
        apply(yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": name, "namespace": ns}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": role, "namespace": ns}, "rules": ROLE_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": role, "namespace": ns},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
             "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}]))
        token = devlab.kubectl("create", "token", name, "-n", ns, "--duration", "1h",
                               capture=True).stdout.strip()
        workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = workdir / "kubeconfig"
        devlab.write_kubeconfig(self.kubeconfig, token, name)

    def env(self) -> dict[str, str]:
        """This process's environment as the person has it: their kubeconfig, none of the lab
        admin's labgrid keys."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_LABGRID")}
        return {**env, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None):
        exe = devlab.CACHE / "bin" / f"kubernetes-{devlab.K8S_VERSION}" / "kubectl"
        return subprocess.run([str(exe), *args], input=input, env=self.env(), text=True,
                              capture_output=True, timeout=60)
