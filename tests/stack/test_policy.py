"""Lab policy on the real stack: maintenance drain, priority ceilings, inline suites, queue
timeout and TTL after finishing."""

from __future__ import annotations

import time

import pytest
import yaml

import benchfarm_devlab as devlab
from tests.stack.conftest import apply, wait_for
from tests.stack.test_operator import (  # noqa: F401
    GROUP,
    VERSION,
    PersonLock,
    cond,
    custom,
    finished,
    run_yaml,
    status,
    unique,
)

pytestmark = pytest.mark.stack


def _board(custom, name):
    return custom.get_cluster_custom_object(GROUP, VERSION, "boards", name)


def test_maintenance_drains_a_board_and_undraining_lets_runs_through(custom):
    custom.patch_cluster_custom_object(GROUP, VERSION, "boards", "vb-x86-1",
                                       {"spec": {"maintenance": True}})
    try:
        # published as the spec changes (it waited for the refresh that walks every place,
        # up to a minute: twice more than 30 s in a whole make test)
        wait_for("Maintenance state", lambda: _board(custom, "vb-x86-1")["status"]["state"]
                 == "Maintenance", timeout=15)
        name = unique("drained")
        apply(run_yaml(name, selector={"board": "vb-x86-1"}))
        time.sleep(6)
        assert status(custom, name)["phase"] == "Pending"
    finally:
        custom.patch_cluster_custom_object(GROUP, VERSION, "boards", "vb-x86-1",
                                           {"spec": {"maintenance": False}})
    assert cond(finished(custom, name))["status"] == "True"


@pytest.fixture
def policy(custom):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy", "metadata": {"name": "default"},
            "spec": {"default": {"namespace": "default-policy", "maxPriority": 200},
                     "namespaces": [{"namespace": "team-a", "maxPriority": 900,
                                     "allowInlineSuites": True}]}}
    apply(yaml.safe_dump(body))
    time.sleep(2)
    yield
    devlab.apply_lab_policy()   # the lab's own again
    time.sleep(2)


def test_priority_ceiling_and_inline_suites_follow_the_namespace_policy(custom, policy):
    too_high, inline_b, inline_a = unique("prio"), unique("inl"), unique("inl")
    apply(run_yaml(too_high, priority=500))
    inline = [{"name": "hello", "suite": "shell", "command": "echo hello"}]
    body = yaml.safe_load(run_yaml(inline_b, ns="team-b"))
    del body["spec"]["plan"]
    body["spec"]["suites"] = inline
    apply(yaml.safe_dump(body))
    body["metadata"].update(name=inline_a, namespace="team-a")
    body["spec"]["selector"] = {"board": "vb-x86-1"}
    body["spec"]["priority"] = 900
    apply(yaml.safe_dump(body))
    st = finished(custom, too_high, timeout=30)
    assert cond(st)["reason"] == "PolicyViolation" and "200" in cond(st)["message"]
    st = finished(custom, inline_b, "team-b", timeout=30)
    assert cond(st)["reason"] == "PolicyViolation" and "inline suites" in cond(st)["message"]
    assert cond(finished(custom, inline_a, "team-a"))["status"] == "True"


def test_queue_timeout_fails_a_run_that_waited_too_long(custom):
    with PersonLock("vb-x86-1"):
        name = unique("qto")
        apply(run_yaml(name, selector={"board": "vb-x86-1"}, queueTimeoutSeconds=3))
        st = finished(custom, name, timeout=30)
    assert cond(st)["reason"] == "QueueTimeout"


def test_finished_runs_are_deleted_after_their_ttl(custom):
    from kubernetes import client
    name = unique("ttl")
    apply(run_yaml(name, selector={"board": "vb-x86-1"}, ttlSecondsAfterFinished=2, bootCycles=1))

    def gone():
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, "default", "benchmarkruns", name)
            return False
        except client.ApiException as exc:
            return exc.status == 404
    wait_for("the run to finish and be deleted", gone, timeout=240, every=1)
