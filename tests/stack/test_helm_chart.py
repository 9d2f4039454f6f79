"""Issue 6 on the real stack: the chart lints, renders, passes server-side dry run and restricted
pod security, installs, and its RBAC is enough for the operator to run the demo to Succeeded.

There is no kubelet here, so the Deployment's pod never starts; instead the operator is started
locally with exactly the command and environment of the installed Deployment (Secrets and the
ConfigMap resolved as the kubelet would) and a token minted for the chart's ServiceAccount.
"""

from __future__ import annotations

import time

import pytest
import yaml

import benchfarm_devlab as devlab
from tests.stack.chart import (
    CHART,
    create_restricted_namespace,
    helm,
    kubectl,
    lab_values,
    minio_secret,
    start_chart_operator,
    stop,
)
from tests.stack.conftest import apply, wait_for

pytestmark = pytest.mark.stack
NS = "benchfarm-system"


@pytest.fixture(scope="module")
def restricted_namespace(lab):
    return create_restricted_namespace(NS)


def test_helm_lint_passes(lab):
    res = helm("lint", str(CHART), "--strict")
    assert "0 chart(s) failed" in res.stdout


@pytest.mark.parametrize("variant", ["default", "custom"])
def test_rendered_chart_passes_server_side_dry_run(restricted_namespace, tmp_path, variant):
    args = ["template", "bf", str(CHART), "-n", NS, "--kube-version", "1.34.4", "--skip-tests"]
    if variant == "custom":
        custom = {"labgrid": {"coordinator": "coord.lab:20408", "proxy": "jump.lab"},
                  "minio": {"endpoint": "s3.lab:9000", "bucket": "lab-artifacts", "secure": True,
                            "existingSecret": "s3-creds"},
                  "ssh": {"existingSecret": "lab-ssh", "configKey": "ssh_config"},
                  "metrics": {"enabled": False}, "testPlans": {"install": False},
                  "web": {"enabled": False},
                  "labPolicy": {"create": False},
                  "deviceTypes": {"am62x-sk": "name: am62x-sk\nconsole: {prompt: '# '}\nboot: {}\n"},
                  "nodeSelector": {"lab/role": "control"},
                  "tolerations": [{"key": "lab", "operator": "Exists", "effect": "NoSchedule"}],
                  "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}
        f = tmp_path / "custom.yaml"
        f.write_text(yaml.safe_dump(custom))
        args += ["-f", str(f)]
    rendered = helm(*args).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap"} <= kinds
    res = kubectl("apply", "--dry-run=server", "-n", NS, "-f", "-", input=rendered)
    assert "deployment.apps/bf-benchfarm created (server dry run)" in res.stdout
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "bf-benchfarm")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    web = [d["metadata"]["name"] for d in docs if d["metadata"]["name"] == "bf-benchfarm-web"]
    session_cm = next(d for d in docs if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"] == "bf-benchfarm-session")
    session = yaml.safe_load(session_cm["data"]["pod.yaml"])["spec"]
    if variant == "custom":
        assert env["LG_PROXY"]["value"] == "jump.lab" and "Service" not in kinds and not web
        assert "TestPlan" not in kinds
        # the exporters' SSH in the operator's and every session's pod, readable by group 10001
        for pod in (dep["spec"]["template"]["spec"], session):
            c = pod["containers"][0]
            assert {"name": "BENCHFARM_SSH_CONFIG", "value": "/etc/benchfarm/ssh/ssh_config"} \
                in c["env"]
            assert {"name": "ssh", "mountPath": "/etc/benchfarm/ssh", "readOnly": True} \
                in c["volumeMounts"]
            assert {"name": "ssh", "secret": {"secretName": "lab-ssh", "defaultMode": 0o440}} \
                in pod["volumes"]
            assert pod["securityContext"]["fsGroup"] == 10001
    else:
        assert "LG_PROXY" not in env and "TestPlan" in kinds and "LabPolicy" in kinds
        assert "deployment.apps/bf-benchfarm-web created (server dry run)" in res.stdout
        assert len(web) == 7   # its SA, ClusterRole(Binding), Role(Binding), Deployment, Service
        assert "BENCHFARM_SSH_CONFIG" not in env
        assert not [v for v in session["volumes"] if v["name"] == "ssh"]


def test_the_alerting_rules_render_as_a_prometheus_rule_where_the_api_is_served(tmp_path):
    """files/alerts.yaml is the rules' one copy: with the default values the PrometheusRule holds
    exactly its groups; values replace a rule's `for`, threshold and window, add labels, leave a
    rule out, and what they render still loads in Prometheus. No PrometheusRule without the
    monitoring.coreos.com/v1 API, or with alerts.prometheusRule.enabled false."""
    import shutil

    def rule(*extra: str) -> dict | None:
        docs = [d for d in yaml.safe_load_all(helm(
            "template", "bf", str(CHART), "-n", NS, "--kube-version", "1.34.4", "--skip-tests",
            *extra).stdout) if d]
        found = [d for d in docs if d["kind"] == "PrometheusRule"]
        assert len(found) <= 1
        return found[0] if found else None
    api = ("--api-versions", "monitoring.coreos.com/v1")
    assert rule() is None
    assert rule(*api, "--set", "alerts.prometheusRule.enabled=false") is None
    plain = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    default = rule(*api)
    assert default is not None and default["metadata"]["name"] == "bf-benchfarm"
    assert default["spec"]["groups"] == plain["groups"]
    tuned = tmp_path / "alerts.yaml"
    tuned.write_text(yaml.safe_dump({"alerts": {
        "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
        "rules": {"BenchfarmQueueLate": {"threshold": 7200, "for": "15m"},
                  "BenchfarmInfraFailures": {"threshold": 10, "window": "2h",
                                             "labels": {"severity": "critical", "team": "lab"}},
                  "BenchfarmBoardOffline": {"enabled": False}}}}))
    got = rule(*api, "-f", str(tuned))
    assert got is not None and got["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = {r["alert"]: r for g in got["spec"]["groups"] for r in g["rules"]}
    every = {r["alert"] for g in plain["groups"] for r in g["rules"]}
    assert set(rules) == every - {"BenchfarmBoardOffline"}     # left out, the others all there
    assert rules["BenchfarmQueueLate"]["expr"] == "benchfarm_queue_oldest_wait_seconds > 7200"
    assert rules["BenchfarmQueueLate"]["for"] == "15m"
    assert rules["BenchfarmInfraFailures"]["expr"] == \
        "sum by (party) (increase(benchfarm_infra_failures_total[2h])) >= 10"
    assert rules["BenchfarmInfraFailures"]["labels"] == {"severity": "critical", "team": "lab"}
    file = tmp_path / "tuned-rules.yaml"
    file.write_text(yaml.safe_dump({"groups": got["spec"]["groups"]}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (make promtool-deps)"
    import subprocess
    res = subprocess.run([promtool, "check", "rules", str(file)], capture_output=True, text=True)
    assert res.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in res.stdout, \
        res.stdout + res.stderr
    # a value the schema does not know fails the install, not the alert
    res = helm("template", "bf", str(CHART), "--kube-version", "1.34.4",
               "--set", "alerts.rules.BenchfarmNoLeader.threshold=2", check=False)
    assert res.returncode != 0 and "threshold" in res.stderr


def test_pod_template_meets_restricted_pod_security_and_rbac_is_least_privilege(restricted_namespace):
    docs = [d for d in yaml.safe_load_all(helm("template", "bf", str(CHART), "-n", NS,
                                                "--kube-version", "1.34.4").stdout) if d]
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "bf-benchfarm")
    for deployment in (d for d in docs if d["kind"] == "Deployment"):    # the operator's, web's
        spec = dict(deployment["spec"]["template"]["spec"], serviceAccountName="default")
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa-probe", "namespace": NS},
               "spec": spec}
        res = kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod),
                      check=False)
        assert res.returncode == 0 and "violate" not in res.stderr, res.stderr
    # the board sessions' pod template (a Job each) meets the same standard
    session_cm = next(d for d in docs if d["kind"] == "ConfigMap" and
                      d["metadata"]["name"] == "bf-benchfarm-session")
    session = yaml.safe_load(session_cm["data"]["pod.yaml"])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa-session", "namespace": NS},
           "spec": dict(session["spec"], serviceAccountName="default", restartPolicy="Never")}
    res = kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False)
    assert res.returncode == 0 and "violate" not in res.stderr, res.stderr
    # and so does `helm test`'s pod (benchfarm check)
    check = next(d for d in docs if d["kind"] == "Pod" and d["metadata"]["name"] == "bf-benchfarm-check")
    check["spec"]["serviceAccountName"] = "default"
    res = kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(check), check=False)
    assert res.returncode == 0 and "violate" not in res.stderr, res.stderr
    assert dep["spec"]["replicas"] == 2    # one leads through the Lease, one stands by
    assert any(r["resources"] == ["leases"] for d in docs if d["kind"] == "ClusterRole"
               for r in d["rules"])
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    # Secrets by name only: the namespaces' webhook signing keys (Notifications), read; each
    # namespace's store credential, written and read by the operator (its create, which RBAC
    # cannot limit to a name, held to that name by an admission policy) and read by its people
    secret = {"apiGroups": [""], "resources": ["secrets"]}
    assert [r for r in rules if "secrets" in r["resources"]] == [
        {**secret, "resourceNames": ["benchfarm-notifications"], "verbs": ["get"]},
        {**secret, "resourceNames": ["benchfarm-store"], "verbs": ["get", "patch"]},
        {**secret, "verbs": ["create"]},
        {**secret, "resourceNames": ["benchfarm-store"], "verbs": ["get"]}]
    held = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
            and any("benchfarm-store" in v.get("expression", "")
                    for v in d["spec"].get("validations", []))]
    assert held and any(r.get("resources") == ["secrets"]
                        for r in held[0]["spec"]["matchConstraints"]["resourceRules"]), held
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in rules)


def test_installed_chart_runs_the_demo_with_its_own_rbac(restricted_namespace, kube, tmp_path):
    minio_secret(NS)
    # the chart will own the shipped TestPlans; hand them over from `kubectl apply`
    kubectl("delete", "testplans", "--all", "--wait=true")
    helm("uninstall", "bf", "-n", NS, "--wait", check=False)
    helm("install", "bf", str(CHART), "-n", NS, "-f", str(lab_values(tmp_path)), "--wait=false")
    operator = None
    try:
        operator = start_chart_operator(kube, NS, "bf", tmp_path)
        assert kubectl("auth", "can-i", "list", "secrets", "-A",
                       f"--as=system:serviceaccount:{NS}:{operator.account}",
                       check=False).stdout.strip() == "no"
        name = f"chart-demo-{int(time.time())}"
        apply(yaml.safe_dump({"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                              "metadata": {"name": name, "namespace": "default"},
                              "spec": {"selector": {"deviceType": "qemu-x86"}, "plan": "demo",
                                       "bootCycles": 2}}))
        from kubernetes import client

        from tests.stack.test_operator import cond
        custom = client.CustomObjectsApi(kube)

        def done():
            st = custom.get_namespaced_custom_object("benchfarm.io", "v1alpha1", "default",
                                                     "benchmarkruns", name).get("status", {})
            return st if st.get("phase") in ("Succeeded", "Failed") else None
        st = wait_for("the demo run under the chart's RBAC", done, timeout=300, every=1)
        assert cond(st)["status"] == "True", st
        import urllib.request
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{devlab.PORTS.chart_metrics}/metrics").read().decode()
        assert "benchfarm_queue_depth" in metrics and "benchfarm_runs_finished_total" in metrics
        text = operator.log.read_text()
        assert "Forbidden" not in text and " 403" not in text, text[-3000:]
    finally:
        stop(operator and operator.process)
        helm("uninstall", "bf", "-n", NS, "--wait", check=False)
        devlab.start_operator()  # also re-applies the repository's TestPlans



def test_helm_test_audits_the_board_network_with_what_the_release_knows(restricted_namespace,
                                                                        tmp_path):
    """`helm test` has a second pod, `benchfarm check --boards`: under restricted pod security,
    with the device types and the lab's environment a board session has, the dashboard's
    Service and the endpoints the values name; off when tests.boardNetwork.enabled is false."""
    def pods(board_network: dict | None = None) -> dict[str, dict]:
        args = ["template", "bf", str(CHART), "-n", NS, "--kube-version", "1.34.4"]
        if board_network is not None:
            f = tmp_path / "values.yaml"
            f.write_text(yaml.safe_dump({"tests": {"boardNetwork": board_network}}))
            args += ["-f", str(f)]
        return {d["metadata"]["name"]: d for d in yaml.safe_load_all(helm(*args).stdout)
                if d and d["kind"] == "Pod"}
    pod = pods()["bf-benchfarm-check-boards"]
    c = pod["spec"]["containers"][0]
    assert c["command"] == ["benchfarm", "check", "--boards"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["BENCHFARM_DEVICE_TYPES"] == "/etc/benchfarm/device-types"
    assert env["BENCHFARM_WEB_URL"] == f"http://bf-benchfarm-web.{NS}.svc:80"
    assert env["LG_COORDINATOR"] and env["BENCHFARM_CONTROL_ENDPOINTS"] == ""
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    probe = dict(pod, spec=dict(pod["spec"], serviceAccountName="default"))
    res = kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe),
                  check=False)
    assert res.returncode == 0 and "violate" not in res.stderr, res.stderr
    named = pods({"boards": ["am62x-0", "am62x-1"], "limit": 1,
                  "endpoints": ["10.1.0.5:6443=API server", "10.1.9.9:623=BMC"]}
                 )["bf-benchfarm-check-boards"]
    c = named["spec"]["containers"][0]
    assert c["command"] == ["benchfarm", "check", "--limit", "1", "--boards", "am62x-0", "am62x-1"]
    assert {"name": "BENCHFARM_CONTROL_ENDPOINTS",
            "value": "10.1.0.5:6443=API server,10.1.9.9:623=BMC"} in c["env"]
    off = pods({"enabled": False})
    assert "bf-benchfarm-check-boards" not in off and "bf-benchfarm-check" in off
