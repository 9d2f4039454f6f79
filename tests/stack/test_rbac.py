"""Issue 22 item 5 on the real API server: least privilege for benchfarm's accounts, roles for people.

The chart's RBAC, roles for people and admission policies are rendered with `helm template` (job
launcher) and applied; nothing runs (no kubelet is needed for authorization and admission). The
test prints `kubectl auth can-i` for the operator's account, a session's account and three people,
then makes real writes as benchfarm's accounts (impersonated): RBAC lets the operator write Leases
and Roles anywhere, the policies let it write only benchfarm's own.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from benchfarm.operator.launch import jobs
from benchfarm.operator.launch.launchers import Launch
from tests.stack.chart import CHART, helm, kubectl

pytestmark = pytest.mark.stack
NS = "benchfarm-rbac"            # the release's
TEAM = "rbac-team-a"              # a run's
RELEASE = "bfr"
NAME = f"{RELEASE}-benchfarm"
UID = "5e55105e-0000-4000-8000-00000000beef"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
              "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

OPERATOR = f"system:serviceaccount:{NS}:{NAME}"
SESSION = f"system:serviceaccount:{NS}:{jobs.account_name(UID)}"
HEALTH = f"system:serviceaccount:{NS}:{jobs.HEALTH_ACCOUNT}"     # health checks' Jobs
WEB = f"system:serviceaccount:{NS}:{NAME}-web"                   # the dashboard
PEOPLE = {"user": "rbac-alice", "plan author": "rbac-paula", "admin": "rbac-ada"}
COLUMNS = {"operator SA": OPERATOR, "session SA": SESSION, "health SA": HEALTH, "web SA": WEB,
           **{who: name for who, name in PEOPLE.items()}}
BR = "benchmarkruns.benchfarm.io"
BL = "boardleases.benchfarm.io"
BN = "notifications.benchfarm.io"
BB = "benchmarkbisections.benchfarm.io"
ROWS = [
    ("create", "leases.coordination.k8s.io", "kube-system"),
    ("update", "leases.coordination.k8s.io", "kube-system"),
    ("create", "leases.coordination.k8s.io", TEAM),
    ("create", "roles.rbac.authorization.k8s.io", TEAM),
    ("create", "rolebindings.rbac.authorization.k8s.io", TEAM),
    ("create", BR, TEAM),
    ("patch", BR, TEAM),
    ("delete", BR, TEAM),
    ("patch", f"{BR}/status", TEAM),
    ("create", BL, TEAM),
    ("patch", f"{BL}/status", TEAM),
    ("list", "labpolicies.benchfarm.io", None),
    ("patch", "labpolicies.benchfarm.io", None),
    ("list", "testplans.benchfarm.io", None),
    ("create", "testplans.benchfarm.io", None),
    ("list", "boards.benchfarm.io", None),
    ("patch", "boards.benchfarm.io", None),
    ("patch", "boards.benchfarm.io/status", None),
    ("create", "leases.coordination.k8s.io", NS),
    ("get", "secrets", TEAM),
    ("get", "secrets", NS),
    ("list", "secrets", TEAM),
    ("create", BN, TEAM),
    ("patch", f"{BN}/status", TEAM),
    ("create", "tokenreviews.authentication.k8s.io", None),
    ("create", "subjectaccessreviews.authorization.k8s.io", None),
    ("list", BR, TEAM),
    ("create", BB, TEAM),
    ("patch", f"{BB}/status", TEAM),
]


def _doc(kind: str, name: str, namespace: str | None = None, **rest) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, **rest}


def _bind(kind: str, name: str, role: str, user: str, namespace: str | None = None) -> dict:
    return _doc(kind, name, namespace,
                roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": role},
                subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                           "name": user}])


def _people() -> list[dict]:
    """How a lab binds the roles (the chart's NOTES): runs per namespace, the rest cluster-wide."""
    return [_bind("RoleBinding", "rbac-alice-runs", f"{NAME}-user", PEOPLE["user"], TEAM),
            _bind("ClusterRoleBinding", "rbac-alice-lab", f"{NAME}-lab-viewer", PEOPLE["user"]),
            _bind("ClusterRoleBinding", "rbac-paula-plans", f"{NAME}-plan-author",
                  PEOPLE["plan author"]),
            _bind("ClusterRoleBinding", "rbac-ada-admin", f"{NAME}-admin", PEOPLE["admin"])]


def _can(verb: str, resource: str, namespace: str | None, who: str, name: str = "") -> str:
    what, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, f"{what}/{name}" if name else what, f"--as={who}"]
    args += ["--subresource", sub] if sub else []
    args += ["-n", namespace] if namespace else []
    return kubectl(*args, check=False).stdout.strip() or "?"


def _as(who: str, *args: str, input: str | None = None):
    return kubectl(*args, f"--as={who}", input=input, check=False)


def _lease(name: str, namespace: str, **labels: str) -> str:
    return yaml.safe_dump({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": name, "namespace": namespace, "labels": labels},
                           "spec": {"holderIdentity": "rbac-test", "leaseDurationSeconds": 15}})


def _plain_meta(obj: dict) -> dict:
    """A manifest without ownerReferences (the run it names does not exist here)."""
    obj = {**obj, "metadata": {**obj["metadata"]}}
    obj["metadata"].pop("ownerReferences", None)
    return obj


@pytest.fixture(scope="module")
def chart_rbac(lab):
    rendered = helm("template", RELEASE, str(CHART), "-n", NS, "--kube-version", "1.34.4",
                    "--set", "sessions.launcher=job").stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS]
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= \
        {d["kind"] for d in docs}
    for ns in (NS, TEAM):    # a previous run's may still be terminating
        kubectl("wait", "--for=delete", f"namespace/{ns}", "--timeout=60s", check=False)
        kubectl("create", "namespace", ns, check=False)
    extra = [{"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": jobs.account_name(UID), "namespace": NS}}, *_people()]
    text = yaml.safe_dump_all([*docs, *extra])
    kubectl("apply", "-f", "-", input=text)
    yield
    kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=text, check=False)
    kubectl("delete", "namespace", TEAM, NS, "--wait=false", check=False)


def test_benchfarms_accounts_and_people_can_do_what_they_need_and_no_more(chart_rbac):
    # the operator grants the session its Role in the run's namespace, as operator/launch/jobs.py does:
    # RBAC lets it (it holds all it grants) and so does the admission policy
    req = Launch(TEAM, "rbac-run", UID, 1, 0, deadline_s=600.0)
    for obj in (jobs.session_role(req), jobs.session_binding(req, NS)):
        del obj["metadata"]["ownerReferences"]     # no such run: the GC would collect them
        res = _as(OPERATOR, "create", "-f", "-", input=yaml.safe_dump(obj))
        assert res.returncode == 0 or "AlreadyExists" in res.stderr, res.stderr

    cells = [(row, col) for row in ROWS for col in COLUMNS]
    with ThreadPoolExecutor(6) as pool:
        got = dict(zip(cells, pool.map(lambda c: _can(*c[0], COLUMNS[c[1]]), cells), strict=True))
    labels = {row: f"{row[0]} {row[1]} ({row[2] or 'cluster'})" for row in ROWS}
    width = max(map(len, labels.values()))
    lines = ["kubectl auth can-i".ljust(width) + " | " + " | ".join(c.ljust(11) for c in COLUMNS)]
    for row in ROWS:
        lines.append(labels[row].ljust(width) + " | " +
                     " | ".join(got[row, c].ljust(11) for c in COLUMNS))
    print("\n" + "\n".join(lines))

    def can(verb, res, ns, col):
        return got[(verb, res, ns), col] == "yes"

    # people
    assert can("create", BR, TEAM, "user") and can("delete", BR, TEAM, "user")
    assert not can("patch", f"{BR}/status", TEAM, "user")        # the operator's record
    assert can("list", "boards.benchfarm.io", None, "user")         # through lab-viewer
    assert not can("create", "testplans.benchfarm.io", None, "user")
    assert not can("patch", "labpolicies.benchfarm.io", None, "user")
    assert can("create", "testplans.benchfarm.io", None, "plan author")
    assert not can("create", BR, TEAM, "plan author")
    assert can("patch", "labpolicies.benchfarm.io", None, "admin")
    assert can("patch", "boards.benchfarm.io", None, "admin")       # maintenance
    for col in COLUMNS:
        assert not can("get", "secrets", TEAM, col) and not can("get", "secrets", NS, col)
    # a session: its own run's status and Lease, nothing of the lab's
    assert not can("patch", f"{BR}/status", TEAM, "session SA")     # only its own run's:
    assert _can("patch", f"{BR}/status", TEAM, SESSION, name=req.name) == "yes"
    assert not can("create", "leases.coordination.k8s.io", "kube-system", "session SA")
    assert not can("create", "rolebindings.rbac.authorization.k8s.io", TEAM, "session SA")
    assert not can("create", BR, TEAM, "session SA")
    assert not can("patch", "boards.benchfarm.io/status", None, "session SA")
    # a health check: Boards' status and Leases in the release's namespace, nothing else
    assert can("patch", "boards.benchfarm.io/status", None, "health SA")
    assert can("create", "leases.coordination.k8s.io", NS, "health SA")
    assert not can("patch", "boards.benchfarm.io", None, "health SA")
    assert not can("create", "leases.coordination.k8s.io", TEAM, "health SA")
    assert not can("patch", f"{BR}/status", TEAM, "health SA")
    # the dashboard: reviews people's tokens and access, reads runs and Boards, writes nothing
    web_can = {row for row in ROWS if can(*row, "web SA")}
    assert web_can == {("create", "tokenreviews.authentication.k8s.io", None),
                       ("create", "subjectaccessreviews.authorization.k8s.io", None),
                       ("list", BR, TEAM), ("list", "boards.benchfarm.io", None)}, web_can
    # BoardLeases: people make them, only benchfarm writes their status (the grant), and a
    # lease's end (a Job under the health account) writes its end
    assert can("create", BL, TEAM, "user") and not can("patch", f"{BL}/status", TEAM, "user")
    assert can("patch", f"{BL}/status", TEAM, "operator SA")
    assert can("patch", f"{BL}/status", TEAM, "health SA") and not can("create", BL, TEAM,
                                                                       "health SA")
    assert not can("create", BL, TEAM, "session SA")
    assert not can("patch", f"{BL}/status", TEAM, "session SA")
    # Notifications: a team makes them, only benchfarm writes their status; the operator reads
    # the one Secret benchfarm-notifications of a namespace (webhooks' signing keys), by name,
    # and no other Secret: no list, no other name
    assert can("create", BN, TEAM, "user") and not can("patch", f"{BN}/status", TEAM, "user")
    # BenchmarkBisections: a team makes them in its namespace, only the operator writes their
    # status (the steps, the answer); a session makes none
    assert can("create", BB, TEAM, "user") and not can("patch", f"{BB}/status", TEAM, "user")
    assert can("patch", f"{BB}/status", TEAM, "operator SA")
    assert not can("create", BB, TEAM, "session SA") and not can("patch", f"{BB}/status", TEAM,
                                                                  "session SA")
    assert can("patch", f"{BN}/status", TEAM, "operator SA")
    assert _can("get", "secrets", TEAM, OPERATOR, name="benchfarm-notifications") == "yes"
    assert _can("get", "secrets", TEAM, OPERATOR, name="team-a-db") == "no"
    assert not any(can("list", "secrets", TEAM, col) for col in COLUMNS)
    for col in COLUMNS:
        if col != "operator SA":
            assert _can("get", "secrets", TEAM, COLUMNS[col],
                        name="benchfarm-notifications") == "no", col
    # each namespace's store credential (operator/stores/accounts.py): the operator writes and reads
    # the Secret benchfarm-store by that name; the namespace's people read it (their CI's way to
    # the store with their own token), and no other Secret
    assert _can("get", "secrets", TEAM, OPERATOR, name="benchfarm-store") == "yes"
    assert _can("patch", "secrets", TEAM, OPERATOR, name="benchfarm-store") == "yes"
    assert _can("get", "secrets", TEAM, PEOPLE["user"], name="benchfarm-store") == "yes"
    assert _can("get", "secrets", TEAM, PEOPLE["user"], name="team-a-db") == "no"
    assert _can("get", "secrets", TEAM, SESSION, name="benchfarm-store") == "no"


def test_the_policies_hold_benchfarms_accounts_to_benchfarms_own_objects(chart_rbac):
    session = {"benchfarm.io/session": "true", "benchfarm.io/run-uid": UID}
    checks = []

    def write(what: str, who: str, *args: str, input: str | None = None,
              allowed: bool) -> None:
        res = _as(COLUMNS[who], *args, input=input)
        checks.append((what, who, "allowed" if res.returncode == 0 else
                       "denied: " + res.stderr.strip(), allowed))

    write("create Lease kube-system/kube-scheduler-rbac", "operator SA", "create", "-f", "-",
          input=_lease("kube-scheduler-rbac", "kube-system"), allowed=False)
    write(f"create Lease {TEAM}/other (no labels)", "operator SA", "create", "-f", "-",
          input=_lease("other", TEAM), allowed=False)
    write(f"create Lease {TEAM}/benchfarm-run-x (labelled)", "operator SA", "create", "-f", "-",
          input=_lease("benchfarm-run-x", TEAM, **{"benchfarm.io/session": "true"}),
          allowed=True)
    unlabelled = yaml.safe_load(kubectl("get", "lease", "-n", TEAM, "benchfarm-run-x", "-o",
                                        "yaml", check=False).stdout or "{}")
    if unlabelled:
        del unlabelled["metadata"]["labels"]
    write(f"unlabel Lease {TEAM}/benchfarm-run-x (update)", "operator SA", "replace", "-f", "-",
          input=yaml.safe_dump(unlabelled), allowed=False)
    write(f"delete Lease {TEAM}/benchfarm-run-x", "operator SA", "delete", "lease", "-n", TEAM,
          "benchfarm-run-x", allowed=True)
    write(f"create Lease {NS}/benchfarm-operator (leader)", "operator SA", "create", "-f", "-",
          input=_lease("benchfarm-operator", NS), allowed=True)
    write(f"create Lease {TEAM}/benchfarm-run-rbac-run (own run)", "session SA", "create", "-f",
          "-", input=_lease("benchfarm-run-rbac-run", TEAM, **session), allowed=True)
    write(f"create Lease {TEAM}/benchfarm-run-y (another run's uid)", "session SA", "create",
          "-f", "-", input=_lease("benchfarm-run-y", TEAM, **{**session,
                                                                "benchfarm.io/run-uid": "x"}),
          allowed=False)
    health = {"benchfarm.io/session": "true", "benchfarm.io/health-check": "true"}
    write(f"create Lease {NS}/benchfarm-health-vb-0 (a health check's)", "health SA", "create",
          "-f", "-", input=_lease("benchfarm-health-vb-0", NS, **health), allowed=True)
    write(f"delete Lease {NS}/benchfarm-health-vb-0", "health SA", "delete", "lease", "-n", NS,
          "benchfarm-health-vb-0", allowed=True)
    write(f"create Lease {NS}/benchfarm-health-vb-1 (by the operator)", "operator SA", "create",
          "-f", "-", input=_lease("benchfarm-health-vb-1", NS, **health), allowed=True)
    write(f"create Lease {NS}/benchfarm-health-vb-2 (unlabelled)", "health SA", "create", "-f",
          "-", input=_lease("benchfarm-health-vb-2", NS), allowed=False)
    write(f"create Lease {NS}/benchfarm-run-z (a run's)", "health SA", "create", "-f", "-",
          input=_lease("benchfarm-run-z", NS, **session), allowed=False)
    managed = {"app.kubernetes.io/managed-by": "benchfarm"}
    for name, labels, allowed in (("benchfarm-store", managed, True),
                                  ("team-a-db", managed, False), ("benchfarm-store", {}, False)):
        secret = {"apiVersion": "v1", "kind": "Secret", "stringData": {"k": "v"},
                  "metadata": {"name": name, "namespace": TEAM, "labels": labels}}
        kubectl("delete", "secret", "-n", TEAM, name, "--ignore-not-found", check=False)
        write(f"create Secret {TEAM}/{name}{' (labelled)' if labels else ''}", "operator SA",
              "create", "-f", "-", input=yaml.safe_dump(secret), allowed=allowed)
    write(f"create Role {TEAM}/tenant-role", "operator SA", "create", "-f", "-",
          input=yaml.safe_dump(_doc("Role", "tenant-role", TEAM, rules=[])), allowed=False)
    binding = _bind("RoleBinding", "benchfarm-session-rbac-x", f"{NAME}-session-policy",
                    "rbac-mallory", TEAM)
    binding["metadata"]["labels"] = managed
    write(f"create RoleBinding {TEAM}/benchfarm-session-rbac-x of a ClusterRole",
          "operator SA", "create", "-f", "-", input=yaml.safe_dump(binding), allowed=False)
    role = _doc("Role", "benchfarm-session-rbac-x", TEAM, rules=[
        {"apiGroups": ["benchfarm.io"], "resources": ["boards"], "verbs": ["get"]}])
    role["metadata"]["labels"] = managed
    write(f"create Role {TEAM}/benchfarm-session-rbac-x over boards", "operator SA", "create",
          "-f", "-", input=yaml.safe_dump(role), allowed=False)

    # warm session slots (operator/launch/warm.py): a slot's Role reads only its own ConfigMap, in the
    # release's namespace; a run's Role may be bound to a slot's account, to nobody else's
    slot = "benchfarm-warm-rbac0001"
    for where, name, rule, allowed in [
            (NS, slot, {"resources": ["configmaps"], "resourceNames": [slot]}, True),
            (NS, "benchfarm-warm-rbac0002", {"resources": ["configmaps"],
                                             "resourceNames": [slot]}, False),
            (NS, "benchfarm-warm-rbac0003", {"resources": ["configmaps"], "verbs": ["create"],
                                             "resourceNames": ["benchfarm-warm-rbac0003"]}, False),
            (TEAM, "benchfarm-warm-rbac0004", {"resources": ["events"], "verbs": ["create"],
                                               "resourceNames": ["benchfarm-warm-rbac0004"]},
             False)]:
        role = _doc("Role", name, where, rules=[{"apiGroups": [""], "verbs": ["get", "watch"],
                                                 **rule}])
        role["metadata"]["labels"] = managed
        what = (f"create Role {where}/{name}: {rule.get('verbs', 'read')} "
                f"{rule['resources'][0]} {rule['resourceNames']}")
        write(what, "operator SA", "create", "-f", "-", input=yaml.safe_dump(role),
              allowed=allowed)
    run_role = jobs.session_role(Launch(TEAM, "warm-run", UID, 1, 0), create_lease=False)
    kubectl("create", "-f", "-", input=yaml.safe_dump(_plain_meta(run_role)), check=False)
    for account, allowed in [(slot, True), ("rbac-mallory", False)]:
        bound = jobs.session_binding(Launch(TEAM, "warm-run", UID, 1, 0), NS, account=account)
        bound["metadata"]["name"] = run_role["metadata"]["name"]
        kubectl("delete", "rolebinding", "-n", TEAM, bound["metadata"]["name"],
                "--ignore-not-found", check=False)
        write(f"create RoleBinding {TEAM}/<run's> to the account {NS}/{account}", "operator SA",
              "create", "-f", "-", input=yaml.safe_dump(_plain_meta(bound)), allowed=allowed)

    width = max(len(c[0]) for c in checks)
    print("\n" + "\n".join(f"{what:<{width}}  {who:<11}  " +
                           outcome.split(" denied request: ")[-1][:90]
                           for what, who, outcome, _ in checks))
    for what, who, outcome, allowed in checks:
        assert outcome.startswith("allowed") == allowed, (what, who, outcome)
        # RBAC allows every one of these writes (kube-system's Leases included): the policies deny
        assert allowed or "ValidatingAdmissionPolicy" in outcome, (what, who, outcome)
