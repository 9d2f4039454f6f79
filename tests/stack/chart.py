"""Helpers of the chart's stack tests: helm and kubectl against the lab, lab values for an install,
and what the kubelet would hand a pod's first container (its command, env with Secrets and
ConfigMaps resolved, volumes as local directories), so an installed chart's pods can be played by
local processes under their own ServiceAccounts where no kubelet runs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import benchfarm_devlab as devlab
from benchfarm_devlab import democluster

CHART = devlab.REPO / "helm" / "benchfarm"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The embedded lab's helm (`democluster.helm`: its binary, homes and environment); a
    failure is the test's, with helm's whole output."""
    res = democluster.helm(*args, check=False)
    if check and res.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}")
    return res


def kubectl(*args: str, input: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    exe = devlab.CACHE / "bin" / f"kubernetes-{devlab.K8S_VERSION}" / "kubectl"
    res = subprocess.run([str(exe), *args], input=input, env={**os.environ, **devlab.lab_env()},
                         capture_output=True, text=True)
    if check and res.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}")
    return res


def lab_values(tmp_path: Path, **extra: Any) -> Path:
    env = devlab.lab_env()
    values = {
        "labgrid": {"coordinator": env["LG_COORDINATOR"],
                    "tls": {"existingSecret": "benchfarm-labgrid",
                            "issuerSecret": "benchfarm-labgrid-issuer"}},
        "minio": {"endpoint": env["BENCHFARM_S3_ENDPOINT"], "bucket": env["BENCHFARM_S3_BUCKET"],
                  "existingSecret": "benchfarm-minio"},
        "probes": {"port": devlab.PORTS.chart_probes},
        "metrics": {"port": devlab.PORTS.chart_metrics},
        "labPolicy": {"create": False},
        "sessions": {"launcher": "process"},
        # the exporter hosts' SSH: the only way to the boards' consoles and power (the exporters
        # are --isolated in the lab network) and where software is staged
        "ssh": {"existingSecret": "benchfarm-ssh"},
        **extra,
    }
    path = tmp_path / "lab-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def create_restricted_namespace(namespace: str) -> str:
    """A namespace that enforces the `restricted` pod security standard."""
    kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest"}}}))
    return namespace


def minio_secret(namespace: str) -> None:
    """The store's keys, the operator's labgrid certificate (the coordinator takes nothing
    else), the labgrid CA that issues sessions' certificates and the exporter hosts' SSH, as the
    Secrets `lab_values` names. The SSH Secret is the lab's own ssh_config (its key and
    known_hosts at their paths on this machine, where the tests run the pods' containers as
    local processes), not the one-node cluster's (`sshd.pod_files`)."""
    from benchfarm_devlab.democluster import labgrid_issuer_secret, labgrid_secret
    kubectl("apply", "-f", "-", input=json.dumps(labgrid_secret(namespace, "benchfarm-labgrid")))
    kubectl("apply", "-f", "-",
            input=json.dumps(labgrid_issuer_secret(namespace, "benchfarm-labgrid-issuer")))
    env = devlab.lab_env()
    kubectl("create", "secret", "generic", "benchfarm-ssh", "-n", namespace,
            f"--from-file=config={env['BENCHFARM_SSH_CONFIG']}", check=False)
    kubectl("create", "secret", "generic", "benchfarm-minio", "-n", namespace,
            f"--from-literal=accessKey={env['BENCHFARM_S3_ACCESS_KEY']}",
            f"--from-literal=secretKey={env['BENCHFARM_S3_SECRET_KEY']}", check=False)


def pod_command_env(spec: dict[str, Any], namespace: str, pod_name: str,
                    workdir: Path) -> tuple[list[str], dict[str, str]]:
    """What the kubelet would give the pod's first container: its command and its env, with
    Secrets, ConfigMaps and field references resolved and mount paths mapped to local dirs."""
    container = spec["containers"][0]
    mounts: dict[str, Path] = {}
    for vol in spec.get("volumes") or []:
        mount = next(m for m in container["volumeMounts"] if m["name"] == vol["name"])
        local = workdir / pod_name / vol["name"]
        local.mkdir(parents=True, exist_ok=True)
        if "configMap" in vol:
            cm = yaml.safe_load(kubectl("get", "configmap", "-n", namespace,
                                        vol["configMap"]["name"], "-o", "yaml").stdout)
            for key, text in cm["data"].items():
                (local / key).write_text(text)
        elif "secret" in vol:
            secret = yaml.safe_load(kubectl("get", "secret", "-n", namespace,
                                            vol["secret"]["secretName"], "-o", "yaml").stdout)
            data = secret.get("data") or {}
            # `items`: only the keys it names, at the paths it gives (a session's labgrid CA)
            for key, path in ({i["key"]: i["path"] for i in vol["secret"]["items"]}
                              if vol["secret"].get("items") else {k: k for k in data}).items():
                (local / path).write_bytes(base64.b64decode(data[key]))
                (local / path).chmod(0o600)
        mounts[mount["mountPath"]] = local
    env: dict[str, str] = {}
    for e in container["env"]:
        if "value" in e:
            value = e["value"]
            for mount_path, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
                if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
                    value = str(local) + value[len(mount_path):]
                    break
            env[e["name"]] = value
        elif "fieldRef" in e["valueFrom"]:
            field = e["valueFrom"]["fieldRef"]["fieldPath"]
            env[e["name"]] = {"metadata.namespace": namespace, "metadata.name": pod_name}[field]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            secret = yaml.safe_load(kubectl("get", "secret", "-n", namespace, ref["name"], "-o",
                                            "yaml").stdout)
            env[e["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
    return container["command"], env


def service_account_kubeconfig(kube: Any, namespace: str, sa: str, path: Path) -> None:
    from kubernetes import client
    token = client.CoreV1Api(kube).create_namespaced_service_account_token(
        sa, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    devlab.write_kubeconfig(path, token, f"system:serviceaccount:{namespace}:{sa}")


def local_process(command: list[str], env: dict[str, str], kubeconfig: Path,
                  log: Path) -> subprocess.Popen:
    """A pod's container as a local process of the test's venv, with only its own env (and the
    test's PYTHONPATH, if any: the code under test, as the image would carry it, not whatever
    the shared venv's editable install points at)."""
    code = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(devlab.VENV_BIN / command[0]), *command[1:]], stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
            env={"PATH": f"{devlab.VENV_BIN}:/usr/bin:/bin", "KUBECONFIG": str(kubeconfig),
                 **code, **env})


def alive(url: str) -> bool:
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


@dataclass
class ChartOperator:
    process: subprocess.Popen
    env: dict[str, str]
    account: str
    log: Path


def start_chart_operator(kube: Any, namespace: str, release: str, workdir: Path) -> ChartOperator:
    """The installed Deployment's operator as a local process, with its command and env, under a
    token of the chart's ServiceAccount; the lab's own operator is stopped (one per lab)."""
    from tests.stack.conftest import wait_for
    dep = yaml.safe_load(kubectl("get", "deployment", "-n", namespace, f"{release}-benchfarm",
                                 "-o", "yaml").stdout)
    spec = dep["spec"]["template"]["spec"]
    command, env = pod_command_env(spec, namespace, f"{release}-operator-0", workdir)
    kubeconfig = workdir / f"{release}-operator.kubeconfig"
    service_account_kubeconfig(kube, namespace, spec["serviceAccountName"], kubeconfig)
    devlab.stop_process("benchfarm-operator")
    log = workdir / f"{release}-operator.log"
    operator = ChartOperator(local_process(command, env, kubeconfig, log), env,
                             spec["serviceAccountName"], log)
    wait_for("the chart's operator", lambda: alive(env["BENCHFARM_LIVENESS"].replace(
        "0.0.0.0", "127.0.0.1")), timeout=90)
    return operator


def stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)
