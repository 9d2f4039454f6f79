"""A lease's labgrid user is its creator (`api.labgridusers`), and the LabPolicy's per-namespace
caps on what a run may ask for (`maxTimeoutSeconds`): the pure parts and the generated policy.
The API server's side is tests/stack/test_leases.py."""

from __future__ import annotations

import re
from types import SimpleNamespace

from hypothesis import given, strategies as st

from benchfarm.api import crdgen
from benchfarm.api.labgridusers import (
    ESCAPES,
    LAB_HOSTS,
    NAME_PATTERN,
    cel_labgrid_name,
    labgrid_name,
    user_problem,
)
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.leases import BoardLeaseSpec
from benchfarm.api.places import DEFAULT_HOST, SESSION_HOST, lease_identity, run_identity
from benchfarm.cli.lease import default_user, lease_name
from benchfarm.operator.runs import admission


def test_people_s_names_as_labgrid_spells_them():
    assert labgrid_name("carol") == "carol"
    assert labgrid_name("benchfarm-admin") == "benchfarm-admin"
    assert labgrid_name("alice@example.com") == "alice_aexample.com"
    assert labgrid_name("system:serviceaccount:team-a:ci") == "system_cserviceaccount_cteam-a_cci"
    assert labgrid_name("a_c") == "a__c" and labgrid_name("a:") == "a_c"   # never the same
    for nameless in ("", "-x", ".x", "_x", "carol smith", "ünï", "a\nb", "a;b"):
        assert labgrid_name(nameless) is None, nameless


# what Kubernetes user names are made of: the escaped characters among plain ones
NAMES = st.text(alphabet="ab_.-:@/+#=~%", max_size=12)


@given(NAMES, NAMES)
def test_two_people_never_share_a_labgrid_name(a, b):
    na, nb = labgrid_name("x" + a), labgrid_name("x" + b)
    assert na is not None and re.match(NAME_PATTERN, na)
    assert (na == nb) == (a == b)


def test_a_lease_names_its_creator_and_never_the_lab():
    assert user_problem("desk/carol", "carol") is None
    assert "<host>/carol" in (user_problem("desk/dave", "carol") or "")
    assert "<host>/alice_aexample.com" in (user_problem("desk/alice", "alice@example.com") or "")
    for host, user in (run_identity("u-1"), lease_identity("u-2"), (DEFAULT_HOST, "benchfarm")):
        problem = user_problem(f"{host}/{user}", None)
        assert problem and "the lab's own labgrid identity" in problem, (host, user)
        assert user_problem(f"{host.upper()}/carol", "carol")   # labgrid's names, any case
    assert SESSION_HOST in LAB_HOSTS and DEFAULT_HOST in LAB_HOSTS
    assert "no labgrid name" in (user_problem("desk/x", "carol smith") or "")


def test_benchfarm_lease_fills_in_the_creator_s_user_and_a_dns_name():
    user = default_user("system:serviceaccount:team-a:ci", host="desk")
    assert user == "desk/system_cserviceaccount_cteam-a_cci"
    BoardLeaseSpec(selector={"board": "vb-x86-1"}, duration="1h", user=user)   # the schema's
    assert user_problem(user, "system:serviceaccount:team-a:ci") is None
    name = lease_name(user)
    assert re.match(r"^system-cserviceaccount-cteam-a-cci-[0-9a-f]{5}$", name), name
    assert re.match(r"^lease-[0-9a-f]{5}$", lease_name("desk/__"))


def test_the_admission_policy_spells_the_same_name():
    policy, binding = crdgen.lease_user_admission()
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["mine"] == cel_labgrid_name("request.userInfo.username")
    # the CEL chain, read back and applied here, is labgrid_name (order included)
    steps = re.findall(r"\.replace\('(.)', '(..?)'\)", variables["mine"])
    assert tuple(steps) == ESCAPES
    checks = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert all(f"'{h}'" in checks for h in LAB_HOSTS) and NAME_PATTERN in checks
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    assert "paramKind" not in policy["spec"]        # holds without a LabPolicy too


# -- the LabPolicy's cap on timeoutSeconds -----------------------------------------------------
class FakeKube:
    def __init__(self) -> None:
        self.patches: list[dict] = []
        self.events: list[tuple] = []

    def patch_run_status(self, ns, name, patch):
        self.patches.append(patch)

    def event(self, body, type_, reason, message):
        self.events.append((type_, reason, message))

    def get_cluster(self, plural, name):
        return {"spec": {"suites": [{"name": "hello", "suite": "shell", "command": "echo hi"}]}}


def admit(spec: dict, policy: dict) -> dict:
    rt = SimpleNamespace(kube=FakeKube(), policy=LabPolicySpec(**policy), inventory_known=False,
                         store=SimpleNamespace(config=SimpleNamespace(bucket="bench")),
                         internal=(), signing_key=b"k" * 32, wake=lambda: None)
    body = {"metadata": {"namespace": "team-a", "name": "r1", "uid": "u-1", "generation": 1},
            "spec": {"selector": {"deviceType": "t"}, "plan": "p", **spec}}
    admission.admit(rt, body)
    return rt.kube.patches[-1]


def test_a_run_asking_for_a_longer_timeout_than_its_namespace_may_is_refused():
    capped = {"namespaces": [{"namespace": "team-a", "maxTimeoutSeconds": 7200}]}
    status = admit({"timeoutSeconds": 7201}, capped)
    cond = status["conditions"][0]
    assert status["phase"] == "Failed" and cond["reason"] == "PolicyViolation"
    assert "timeoutSeconds 7201" in cond["message"] and "7200" in cond["message"]
    assert admit({"timeoutSeconds": 7200}, capped)["phase"] == "Pending"
    assert admit({}, capped)["phase"] == "Pending"                  # the default, 3600
    assert admit({"timeoutSeconds": 7 * 86400}, {})["phase"] == "Pending"   # no cap by default
    other = {"namespaces": [{"namespace": "team-b", "maxTimeoutSeconds": 60}]}
    assert admit({"timeoutSeconds": 7201}, other)["phase"] == "Pending"


def test_the_operator_refuses_a_lease_under_a_lab_identity_where_no_policy_did():
    """A cluster without the admission policy (or a lease older than it): the operator never
    queues a lease for `benchfarm/run-<uid>`; it is Refused with UserNotAllowed, said in an event."""
    from benchfarm.operator.leases.keeper import Leases
    written, events = [], []
    rt = SimpleNamespace(
        policy=LabPolicySpec(namespaces=[{"namespace": "team-a", "leases": {"allowed": True}}]),
        inventory_known=False, wake=lambda: None,
        kube=SimpleNamespace(event=lambda ref, kind, reason, message: events.append(reason)))
    book = SimpleNamespace(write=lambda ns, name, status: written.append(status) or True)
    manager = SimpleNamespace(rt=rt, book=book)

    def admit(user: str) -> dict:
        Leases.admit(manager, {"metadata": {"namespace": "team-a", "name": "l", "uid": "u"},
                               "spec": {"selector": {"board": "vb-x86-1"}, "duration": "1h",
                                        "user": user}})
        return written[-1]
    st = admit(f"benchfarm/run-{'0' * 8}")
    cond = st["conditions"][0]
    assert st["phase"] == "Refused" and cond["reason"] == "UserNotAllowed", st
    assert "the lab's own labgrid identity" in cond["message"] and events[-1] == "UserNotAllowed"
    assert admit("desk/carol")["phase"] == "Pending"
