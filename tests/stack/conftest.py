"""Real-stack fixtures: the lab from `benchfarm lab up`, the operator process, API helpers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

import benchfarm_devlab as devlab

pytestmark = pytest.mark.stack


@pytest.fixture(scope="session")
def lab() -> dict[str, str]:
    devlab.up()
    env = devlab.lab_env()
    os.environ.update({k: v for k, v in env.items() if k != "PATH"})
    return env


@pytest.fixture(scope="session")
def kube(lab):
    from kubernetes import client, config
    config.load_kube_config(config_file=lab["KUBECONFIG"])
    return client.ApiClient()


@pytest.fixture(scope="session")
def operator(lab) -> None:
    devlab.start_operator()


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 120, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def apply(text: str) -> None:
    """kubectl apply from a string; raises with kubectl's own message on rejection."""
    import subprocess
    env = {**os.environ, **devlab.lab_env()}
    exe = devlab.CACHE / "bin" / f"kubernetes-{devlab.K8S_VERSION}" / "kubectl"
    res = subprocess.run([str(exe), "apply", "-f", "-"], input=text, env=env, text=True,
                         capture_output=True)
    if res.returncode != 0:
        raise RuntimeError(res.stderr)


def load(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def off_owner_writes() -> dict[str, float]:
    """What the running operator counted of records changed by a thread other than their
    owner's (`operator.state.owner`: each is a bug), by kind of record; read from its /metrics, which
    serves the counter's family whether or not it was ever counted."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    url = f"http://127.0.0.1:{devlab.PORTS.operator_metrics}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    family = families.get("benchfarm_off_owner_writes")
    assert family is not None, "the operator does not serve benchfarm_off_owner_writes_total"
    return {s.labels["record"]: s.value for s in family.samples if s.name.endswith("_total")}
