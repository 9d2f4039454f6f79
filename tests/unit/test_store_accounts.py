"""Each namespace's store credential (issue 53 item 1): the policy a namespace's MinIO user gets,
the Secret that carries it, how the CLI reads it, and when the operator issues it again. The
store's own answers to that policy (AccessDenied for every other folder): tests/stack/
test_tenant_store.py on the embedded lab's MinIO."""

from __future__ import annotations

import fnmatch

import pytest
from kubernetes.client import ApiException

from benchfarm.errors import InfraError
from benchfarm.operator.stores.accounts import StoreAccounts, public_store
from benchfarm.store.accounts import (
    SECRET,
    config_from_secret,
    namespace_policy,
    namespace_store,
    new_secret_key,
    policy_name,
    secret_data,
    user_name,
)
from benchfarm.store.artifacts import StoreConfig

LAB = StoreConfig(endpoint="minio:9000", access_key="root", secret_key="root-secret",
                  bucket="benchfarm-artifacts")


def _allowed(policy: dict, action: str, resource: str, prefix: str | None = None) -> bool:
    """What an IAM evaluation of this allow-only policy says (StringLike conditions on s3:prefix)."""
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow"
        if action not in st["Action"]:
            continue
        if not any(fnmatch.fnmatchcase(resource, r) for r in st["Resource"]):
            continue
        like = st.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if like is not None and (prefix is None or not any(
                fnmatch.fnmatchcase(prefix, p) for p in like)):
            continue
        return True
    return False


def test_a_namespaces_policy_reaches_its_own_folder_only():
    p = namespace_policy("benchfarm-artifacts", "team-a")
    obj = "arn:aws:s3:::benchfarm-artifacts/{}"
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert _allowed(p, action, obj.format("team-a/ci/1/bzImage"))
        assert not _allowed(p, action, obj.format("team-b/run/uid/metrics.json"))
        assert not _allowed(p, action, obj.format("team-a-evil/x"))      # a longer name
        assert not _allowed(p, action, obj.format("builds/linux/bzImage"))
        assert not _allowed(p, action, obj.format("team-a"))
        assert not _allowed(p, action, "arn:aws:s3:::other-bucket/team-a/x")
    bucket = "arn:aws:s3:::benchfarm-artifacts"
    assert _allowed(p, "s3:ListBucket", bucket, prefix="team-a/ci/")
    assert not _allowed(p, "s3:ListBucket", bucket, prefix="team-b/")
    assert not _allowed(p, "s3:ListBucket", bucket, prefix="")
    assert not _allowed(p, "s3:ListBucket", bucket)                      # no prefix: everything
    assert not any(a.startswith("admin:") or a == "s3:*"
                   for st in p["Statement"] for a in st["Action"])


@pytest.mark.parametrize("bad", ["", "*", "team/*", "a/b", "Team", "-a", "a" * 64, "a?"])
def test_only_a_namespace_name_makes_a_policy(bad):
    with pytest.raises(ValueError):
        namespace_policy("b", bad)
    with pytest.raises(ValueError):
        user_name(bad)


def test_the_secret_carries_the_credential_the_cli_reads():
    mine = StoreConfig(endpoint="store.lab:443", access_key=user_name("team-a"),
                       secret_key=new_secret_key(), bucket="b", secure=True)
    data = {k: v.encode() for k, v in secret_data(mine).items()}
    assert config_from_secret(data) == mine
    assert len(mine.secret_key) == 40 and mine.secret_key != new_secret_key()
    with pytest.raises(ValueError, match="secretKey"):
        config_from_secret({k: v for k, v in data.items() if k != "secretKey"})


def test_the_cli_says_why_it_has_no_credential():
    with pytest.raises(InfraError, match="no store credential yet") as none:
        namespace_store(lambda ns, name: None, "team-a")
    assert none.value.reason == "NoStoreCredential"

    def forbidden(ns, name):
        raise PermissionError(name)
    with pytest.raises(InfraError, match="may not read the Secret benchfarm-store"):
        namespace_store(forbidden, "team-a")
    read = []
    mine = {k: v.encode() for k, v in secret_data(StoreConfig(
        "127.0.0.1:9000", user_name("team-a"), "k" * 40, "b")).items()}
    store = namespace_store(lambda ns, name: read.append((ns, name)) or mine, "team-a")
    assert read == [("team-a", SECRET)]
    assert store.config.access_key == "benchfarm-ns-team-a"


def test_the_public_endpoint_is_what_tenants_are_told():
    assert public_store(LAB, "") == LAB
    assert public_store(LAB, "store.lab.example:9000").endpoint == "store.lab.example:9000"
    tls = public_store(LAB, "https://store.lab.example/")
    assert (tls.endpoint, tls.secure, tls.access_key) == ("store.lab.example", True, "root")


class FakeKube:
    def __init__(self):
        self.secrets: dict[str, dict[str, bytes]] = {}
        self.namespaces = {"team-a", "team-b"}

    def secret_data(self, ns, name):
        assert name == SECRET
        return self.secrets.get(ns)

    def namespace_exists(self, ns):
        return ns in self.namespaces

    def create_namespaced(self, kind, ns, body):
        assert kind == "Secret" and body["metadata"]["name"] == SECRET
        if ns not in self.namespaces:
            raise ApiException(status=404)
        if ns in self.secrets:
            return False
        self.secrets[ns] = {k: v.encode() for k, v in body["stringData"].items()}
        return True

    def patch_namespaced(self, kind, ns, name, patch):
        self.secrets[ns].update({k: v.encode() for k, v in patch["stringData"].items()})


class FakeAdmin:
    def __init__(self):
        self.keys: dict[str, str] = {}
        self.issued: list[str] = []

    def users(self):
        return {u: policy_name(u.removeprefix("benchfarm-ns-")) if u.startswith("benchfarm-ns-")
                else "" for u in self.keys}

    def issue(self, ns, key):
        self.keys[user_name(ns)] = key
        self.issued.append(ns)

    def remove(self, ns):
        del self.keys[user_name(ns)]


def _accounts():
    kube, admin = FakeKube(), FakeAdmin()
    return StoreAccounts(kube, admin, LAB), kube, admin


def _held(kube, ns):
    return config_from_secret(kube.secrets[ns])


def test_a_namespace_gets_its_own_user_and_secret_once():
    acc, kube, admin = _accounts()
    acc.tend(["team-a", "team-b"])
    a, b = _held(kube, "team-a"), _held(kube, "team-b")
    assert (a.access_key, b.access_key) == ("benchfarm-ns-team-a", "benchfarm-ns-team-b")
    assert a.secret_key != b.secret_key and LAB.secret_key not in (a.secret_key, b.secret_key)
    assert admin.keys == {a.access_key: a.secret_key, b.access_key: b.secret_key}
    assert (a.endpoint, a.bucket) == (LAB.endpoint, LAB.bucket)
    acc.tend(["team-a", "team-b"])                 # nothing to do: nothing issued again
    assert admin.issued == ["team-a", "team-b"]


def test_a_deleted_secret_rotates_the_key():
    acc, kube, admin = _accounts()
    acc.tend(["team-a"])
    old = _held(kube, "team-a").secret_key
    del kube.secrets["team-a"]
    acc.tend(["team-a"])
    new = _held(kube, "team-a").secret_key
    assert new != old and admin.keys["benchfarm-ns-team-a"] == new


def test_a_secret_naming_another_user_is_replaced():
    acc, kube, admin = _accounts()
    kube.secrets["team-a"] = {k: v.encode() for k, v in secret_data(StoreConfig(
        LAB.endpoint, user_name("team-b"), "x" * 40, LAB.bucket)).items()}
    acc.tend(["team-a"])
    assert _held(kube, "team-a").access_key == "benchfarm-ns-team-a"
    assert "benchfarm-ns-team-b" not in admin.keys


def test_after_a_start_or_a_lost_user_the_secrets_own_key_is_issued_again():
    acc, kube, admin = _accounts()
    acc.tend(["team-a"])
    key = _held(kube, "team-a").secret_key
    restarted = StoreAccounts(kube, admin, LAB)
    restarted.tend(["team-a"])
    assert admin.issued == ["team-a", "team-a"] and admin.keys["benchfarm-ns-team-a"] == key
    admin.keys.clear()                             # the store lost its users
    restarted.tend(["team-a"])
    assert admin.keys == {"benchfarm-ns-team-a": key}


def test_a_namespace_not_there_yet_keeps_no_user():
    acc, kube, admin = _accounts()
    acc.tend(["not-yet"])
    assert admin.keys == {} and "not-yet" not in kube.secrets


def test_the_key_is_in_force_before_the_secret_shows_it():
    acc, kube, admin = _accounts()
    kube.create_namespaced = lambda kind, ns, body: (
        admin.keys.get(user_name(ns)) == body["stringData"]["secretKey"]) or pytest.fail(
        "the Secret written before the store knows its key")
    acc.tend(["team-a"])


def test_want_wakes_the_tender_for_new_namespaces_only():
    acc, _, _ = _accounts()
    acc.want(["team-a", "team-a"])
    assert acc.wake.is_set() and acc.new == {"team-a"}
    acc.wake.clear()
    acc.new.clear()
    acc.want(["team-a"])
    assert not acc.wake.is_set() and acc.new == set()


def test_an_upload_stays_in_the_namespaces_folder():
    from benchfarm.cli.submit import upload_key
    assert upload_key("team-a", "ci/12/bzImage") == "team-a/ci/12/bzImage"
    for bad in ("", "/abs", "ci/../../builds/bzImage", "ci//x", "ci/", "./x"):
        with pytest.raises(ValueError):
            upload_key("team-a", bad)


def test_a_namespace_named_as_a_folder_of_the_labs_gets_no_credential():
    from benchfarm.api.labpolicy import LabPolicySpec, NamespacePolicy
    acc, kube, admin = _accounts()
    kube.namespaces |= {"builds", "vendor", "team-c"}
    acc.tend(["builds"])
    assert admin.keys == {} and "builds" not in kube.secrets
    acc.tend(["vendor"])                              # not the lab's yet: issued
    assert "benchfarm-ns-vendor" in admin.keys
    acc.policy(LabPolicySpec(namespaces=[NamespacePolicy(
        namespace="team-c", allowSoftware=True, softwareSources=["vendor/bsp/"])]))
    assert acc.new == {"team-c"}
    acc.tend(["vendor", "team-c"])                    # now it is: its user goes
    assert set(admin.keys) == {"benchfarm-ns-team-c"}


def test_a_user_whose_secret_is_gone_goes_too():
    acc, kube, admin = _accounts()
    acc.tend(["team-a", "team-b"])
    restarted = StoreAccounts(kube, admin, LAB)        # asked for team-b only since its start
    restarted.want(["team-b"])
    admin.keys["someone-else"] = "x"                   # not a namespace's: never touched
    restarted.tend([], strays=True)
    assert set(admin.keys) == {"benchfarm-ns-team-a", "benchfarm-ns-team-b", "someone-else"}
    del kube.secrets["team-a"]                          # the namespace went, its Secret too
    kube.namespaces.discard("team-a")
    restarted.tend([], strays=True)
    assert set(admin.keys) == {"benchfarm-ns-team-b", "someone-else"}
    acc.tend(["team-a"], strays=True)                  # still wanted here: not there, no user
    assert "benchfarm-ns-team-a" not in admin.keys and "team-a" not in kube.secrets
    assert admin.issued.count("team-a") == 1           # none issued for a namespace not there


def test_a_wanted_namespace_that_went_keeps_no_user():
    acc, kube, admin = _accounts()
    acc.tend(["team-a"])
    del kube.secrets["team-a"]
    kube.namespaces.discard("team-a")
    acc.tend(["team-a"])
    assert admin.keys == {} and admin.issued == ["team-a"]


def test_every_namespace_is_checked_each_period_however_often_new_ones_come():
    import threading
    acc, kube, admin = _accounts()
    acc.every = 0.3
    seen: list[bool] = []
    acc.tend = lambda due, strays=False: seen.append(strays)
    acc.start()
    try:
        for i in range(12):                           # a new namespace every 0.1 s
            acc.want([f"ns-{i}"])
            threading.Event().wait(0.1)
    finally:
        acc.stop()
    assert seen.count(True) >= 2, seen


def test_a_namespace_being_deleted_loses_its_user_at_once_and_gets_none_again():
    """Its Secret may outlive the namespace's deletion by seconds: the key still goes when the
    namespace is seen going, and no check issues it again from that Secret."""
    acc, kube, admin = _accounts()
    acc.want(["team-a", "team-b"])
    acc.tend(["team-a", "team-b"])
    kube.namespaces.discard("team-a")          # being deleted: its Secret is still there
    acc.gone("team-a")
    assert acc.wake.is_set() and "team-a" not in acc.wanted and acc.going == {"team-a"}
    acc.forget(sorted(acc.going))
    assert set(admin.keys) == {"benchfarm-ns-team-b"}
    acc.want(["team-a"])                       # a run of the namespace seen as it is deleted
    acc.tend(["team-a", "team-b"], strays=True)
    assert set(admin.keys) == {"benchfarm-ns-team-b"} and admin.issued == ["team-a", "team-b"]
    acc.forget(["team-a"])                     # already gone: nothing to do
    assert set(admin.keys) == {"benchfarm-ns-team-b"}


def test_a_stray_user_of_a_namespace_being_deleted_goes_though_its_secret_is_there():
    acc, kube, admin = _accounts()
    acc.tend(["team-a"])
    restarted = StoreAccounts(kube, admin, LAB)      # not asked for team-a since its start
    kube.namespaces.discard("team-a")
    restarted.tend([], strays=True)
    assert admin.keys == {}
