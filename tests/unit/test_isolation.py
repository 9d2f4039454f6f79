"""Tenant data stays in its namespace and the LabPolicy decides what runs on shared boards: the
software-reach check (admission and fetch), address checks after resolution and on redirects,
the run's artifact prefix, the operator's signature on resolved suites, and the CRD rules."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from benchfarm.api.crdgen import all_crds
from benchfarm.api.grants import GoAhead
from benchfarm.api.labpolicy import LabPolicySpec, NamespacePolicy
from benchfarm.api.outcomes import Refusal
from benchfarm.api.runs import Artifact, BenchmarkRunSpec, SoftwareSet, SuiteSpec
from benchfarm.core.policy import trust
from benchfarm.core.policy.software import SoftwareReach, internal_networks
from benchfarm.errors import RunError
from benchfarm.operator.runs import admission
from benchfarm.settings import Settings
from benchfarm.store.artifacts import run_prefix
from benchfarm.store.software import SoftwareCache

BUCKET = "benchfarm-artifacts"
DIGEST = "0" * 64
INTERNAL = internal_networks("10.96.0.0/12, 10.244.0.0/16,fd00::/8")


def reach(**policy) -> SoftwareReach:
    return SoftwareReach(NamespacePolicy(namespace="team-a", **policy), "team-a", BUCKET, INTERNAL)


def kernel(url: str, sums: str | None = None) -> SoftwareSet:
    return SoftwareSet(kernel=Artifact(url=url, sha256Url=sums) if sums else
                       Artifact(url=url, sha256=DIGEST))


GRANTED = dict(allowSoftware=True, softwareSources=["builds/"],
               softwareHosts=["downloads.example.com", "mirror.example.org:8443", "127.0.0.1",
                              "169.254.169.254", "[::1]", "10.96.0.1", "localhost"])


@pytest.mark.parametrize("url", [
    f"s3://{BUCKET}/team-a/kernels/Image",
    f"s3://{BUCKET}/builds/qemu-arm64/debian-arm64/vmlinuz",
    "https://downloads.example.com/linux/Image",
    "http://downloads.example.com:8080/Image",
    "https://mirror.example.org:8443/Image",
])
def test_what_the_namespace_may_reach_is_accepted(url):
    assert reach(**GRANTED).software_problem(kernel(url)) is None


@pytest.mark.parametrize("url, why", [
    (f"s3://{BUCKET}/probe-b/run/uid/metrics.json", "outside what the namespace may read"),
    (f"s3://{BUCKET}/team-a/../probe-b/run/metrics.json", "'..'"),
    (f"s3://{BUCKET}/builds/./x", "'.'"),
    (f"s3://{BUCKET}/team-a//x", "empty"),
    (f"s3://{BUCKET}/team-a/%2e%2e/probe-b/x", "percent-encoding"),
    (f"s3://{BUCKET}/team-ab/x", "outside"),        # a prefix is a folder, not a string start
    ("s3://other-bucket/team-a/Image", "not the lab's artifact bucket"),
    ("https://evil.example.net/Image", "not on the namespace's allow-list"),
    ("https://mirror.example.org/Image", "mirror.example.org:443 is not on"),
    ("http://127.0.0.1:9000/benchfarm-artifacts/x", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[::1]/x", "loopback"),
    ("http://[::ffff:127.0.0.1]/x", "loopback"),
    ("http://0.0.0.0/x", "unspecified"),
    ("http://224.0.0.1/x", "multicast"),
    ("http://10.96.0.1/x", "internal range 10.96.0.0/12"),
    ("http://user@downloads.example.com/x", "user names"),
])
def test_anything_else_is_refused_naming_the_part_the_url_and_the_reach(url, why):
    problem = reach(**GRANTED).software_problem(kernel(url))
    assert problem is not None and problem.reason == Refusal.artifactForbidden
    assert why in problem.message and url in problem.message and "software kernel" in problem.message
    assert f"s3://{BUCKET}/team-a/" in problem.message and "downloads.example.com" in problem.message


def test_the_published_digest_file_is_checked_too():
    problem = reach(**GRANTED).software_problem(
        kernel(f"s3://{BUCKET}/builds/Image", sums=f"s3://{BUCKET}/probe-b/SHA256SUMS"))
    assert problem is not None and "probe-b/SHA256SUMS" in problem.message


def test_no_software_at_all_without_allow_software():
    problem = reach(softwareSources=["builds/"]).software_problem(
        kernel(f"s3://{BUCKET}/team-a/Image"))
    assert problem is not None and problem.reason == Refusal.softwareNotAllowed
    assert "allowSoftware" in problem.message


def test_a_kernel_command_line_alone_needs_allow_software_too():
    """`bootArgs` with no file changes what runs as root on a shared board all the same
    (init=/bin/sh, a module's parameters): refused like the files, at admission and by the
    session, for a namespace without allowSoftware."""
    problem = reach(softwareSources=["builds/"]).software_problem(SoftwareSet(bootArgs="quiet"))
    assert problem is not None and problem.reason == Refusal.softwareNotAllowed
    assert "bootArgs" in problem.message and "allowSoftware" in problem.message
    assert reach(allowSoftware=True).software_problem(SoftwareSet(bootArgs="quiet")) is None
    assert reach().software_problem(None) is None
    status = admit({"software": {"bootArgs": "init=/bin/sh"}}, {})
    assert status["phase"] == "Failed" and status["conditions"][0]["reason"] == \
        "SoftwareNotAllowed"
    status = admit({"software": {"bootArgs": "quiet"}},
                   {"namespaces": [{"namespace": "team-a", "allowSoftware": True}]})
    assert status["phase"] == "Pending", status


# every form of an address that is not on the internet, and what the refusal calls it
NOT_GLOBAL = [
    ("10.1.2.3", "private"), ("172.16.0.9", "private"), ("172.31.255.1", "private"),
    ("192.168.1.1", "private"), ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"), ("[fc00::1]", "unique local"),
    ("[fc12:3456::1]", "unique local"),
    ("[::ffff:10.0.0.1]", "carries 10.0.0.1, a private"),            # IPv4-mapped
    ("[::ffff:100.64.1.1]", "carries 100.64.1.1, a carrier-grade NAT"),
    ("[64:ff9b::a00:1]", "carries 10.0.0.1, a private"),             # NAT64, well-known prefix
    ("[64:ff9b::c0a8:101]", "carries 192.168.1.1, a private"),
    ("[64:ff9b:1::a00:1]", "reserved, non-global"),                   # NAT64, local use
    ("[2002:a00:1::1]", "carries 10.0.0.1, a private"),               # 6to4
    ("[2002:c0a8:101::]", "carries 192.168.1.1, a private"),
    ("[2001::1]", "private"),                                         # Teredo
    ("[::10.0.0.1]", "carries 10.0.0.1, a private"),                  # IPv4-compatible
    ("[::ffff:169.254.169.254]", "link-local"), ("[64:ff9b::a9fe:a9fe]", "link-local"),
    ("[2002:7f00:1::]", "carries 127.0.0.1, a loopback"),
    ("192.0.2.1", "private"), ("198.18.0.1", "private"),             # documentation, benchmarks
    ("240.0.0.1", "private"), ("255.255.255.255", "private"),
    ("[2001:db8::1]", "private"),
]


@pytest.mark.parametrize("host, what", NOT_GLOBAL)
def test_private_and_other_non_global_addresses_are_refused_by_default(host, what):
    """Even a namespace allowed any host it names gets no private, carrier-grade NAT, ULA or
    reserved address, nor an IPv6 form that carries one, unless the LabPolicy lists that very
    address."""
    url = f"http://{host}/Image"
    problem = reach(allowSoftware=True, softwareHosts=["downloads.example.com"]
                    ).software_problem(kernel(url))
    assert problem is not None and problem.reason == Refusal.artifactForbidden, host
    assert what in problem.message and url in problem.message, problem.message


@pytest.mark.parametrize("host", ["10.1.2.3", "[fc12:3456::1]", "100.64.0.1", "[64:ff9b::a00:1]",
                                  "[2002:a00:1::1]"])
def test_a_private_address_the_lab_lists_itself_is_allowed(host):
    assert reach(allowSoftware=True, softwareHosts=[host]).software_problem(
        kernel(f"http://{host}/Image")) is None
    assert reach(allowSoftware=True, softwareHosts=[f"{host}:8080"]).software_problem(
        kernel(f"http://{host}:8080/Image")) is None


@pytest.mark.parametrize("host, listed", [("127.0.0.1", "127.0.0.1"),
                                          ("169.254.169.254", "169.254.169.254"),
                                          ("10.96.0.1", "10.96.0.1"),         # the lab's own
                                          ("[64:ff9b::7f00:1]", "[64:ff9b::7f00:1]"),
                                          ("[::ffff:10.244.0.5]", "[::ffff:10.244.0.5]")])
def test_listing_never_allows_loopback_link_local_or_the_labs_own_ranges(host, listed):
    problem = reach(allowSoftware=True, softwareHosts=[listed]).software_problem(
        kernel(f"http://{host}/Image"))
    assert problem is not None and problem.reason == Refusal.artifactForbidden


def test_a_listed_name_does_not_list_the_private_addresses_it_resolves_to():
    """What a name resolves to is not the lab's decision: the session's check of a resolved
    address allows a private one only when the LabPolicy lists that address itself, in any
    spelling."""
    import ipaddress
    named = reach(allowSoftware=True, softwareHosts=["builds.corp.example", "10.1.257"])
    assert named.address_problem(ipaddress.ip_address("10.1.1.1"), 80) is not None
    assert named.address_problem(ipaddress.ip_address("93.184.216.34"), 80) is None   # public
    assert named.address_problem(ipaddress.ip_address("64:ff9b::5db8:d822"), 80) is None
    listed = reach(allowSoftware=True, softwareHosts=["10.1.1.1:8080", "[FC00:0::5]"])
    assert listed.address_problem(ipaddress.ip_address("10.1.1.1"), 8080) is None
    assert listed.address_problem(ipaddress.ip_address("10.1.1.1"), 80) is not None
    assert listed.address_problem(ipaddress.ip_address("fc00::5"), 443) is None
    assert listed.lists("[fc00::0:5]", 1) and not listed.lists("fc00::6", 1)


def test_public_addresses_and_their_ipv6_forms_are_accepted_when_listed():
    for host in ("93.184.216.34", "[2606:2800:220:1::]", "[64:ff9b::5db8:d822]",
                 "[2002:5db8:d822::1]"):
        assert reach(allowSoftware=True, softwareHosts=[host]).software_problem(
            kernel(f"http://{host}/Image")) is None, host


def test_policy_sources_and_hosts_are_validated():
    for bad in ("builds", "../x/", "./", "builds/../", "/builds/", ".hidden/"):
        with pytest.raises(ValidationError):
            NamespacePolicy(namespace="a", softwareSources=[bad])
    with pytest.raises(ValidationError):
        NamespacePolicy(namespace="a", softwareHosts=["http://host"])
    with pytest.raises(ValueError):
        internal_networks("10.0.0.0/8,not-a-cidr")


def test_the_tenants_prefix_goes_after_its_own_folders_and_never_climbs_out():
    assert run_prefix("ns", "run", "uid") == "ns/run/uid"
    assert run_prefix("ns", "run", "uid", "nightly/2024/") == "ns/run/uid/nightly/2024"
    for bad in ("../other", "a/./b", "a//b"):
        with pytest.raises(ValueError):
            run_prefix("ns", "run", "uid", bad)
    for bad in ("../other", "/abs", "a/../b", ".", "a//b"):
        with pytest.raises(ValidationError):
            BenchmarkRunSpec(selector={"deviceType": "t"}, plan="p", artifactPrefix=bad)
    BenchmarkRunSpec(selector={"deviceType": "t"}, plan="p", artifactPrefix="nightly/v1.2_x/")


def test_the_crds_refuse_a_second_labpolicy_and_a_changed_prefix():
    crds = all_crds()
    root = crds["labpolicies"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["x-kubernetes-validations"][0]["rule"] == "self.metadata.name == 'default'"
    spec = crds["benchmarkruns"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    prefix = spec["spec"]["properties"]["artifactPrefix"]
    assert prefix["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    policy = crds["labpolicies"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    ns = policy["properties"]["spec"]["properties"]["default"]["properties"]
    assert {"allowSoftware", "softwareSources", "softwareHosts"} <= set(ns)
    assert "root on a shared board" in ns["allowSoftware"]["description"]


def test_the_operators_signature_binds_the_suites_to_the_run():
    key = b"k" * 32
    suites = [{"name": "a", "suite": "shell", "command": "true", "parameters": {"x": "1"}}]
    sig = trust.sign(key, "uid-1", suites)
    assert trust.verify(key, "uid-1", [dict(reversed(list(suites[0].items())))], sig)  # key order
    assert not trust.verify(key, "uid-2", suites, sig)
    assert not trust.verify(key, "uid-1", [{**suites[0], "command": "reboot"}], sig)
    assert not trust.verify(b"x" * 32, "uid-1", suites, sig)
    assert not trust.verify(key, "uid-1", suites, None)
    with pytest.raises(ValueError):
        trust.key_from("short")
    assert trust.key_from("s" * 20) == b"s" * 20


def test_a_signature_survives_the_api_servers_round_trip_of_numbers_and_nulls():
    """A plan's envelope holds floats; the API server gives a whole one back as an integer
    (100000.0 -> 100000), and a run with a plan envelope ended StatusNotTrusted, unrun."""
    key = b"k" * 32
    suite = SuiteSpec(name="a", suite="shell", command="true",
                      envelope={"minFrequencyMHz": 100000, "maxBusyBefore": 0.5, "retakes": 1})
    signed = [suite.model_dump(exclude_none=True)]
    assert signed[0]["envelope"]["minFrequencyMHz"] == 100000.0
    sig = trust.sign(key, "uid-1", signed)
    back = json.loads(json.dumps(signed).replace("100000.0", "100000"))
    assert json.dumps(back) != json.dumps(signed)      # the same value, spelled otherwise
    assert trust.verify(key, "uid-1", back, sig)
    assert trust.verify(key, "uid-1", [{**back[0], "background": None}], sig)   # a null: no field
    assert not trust.verify(key, "uid-1", [{**back[0], "envelope": {
        **back[0]["envelope"], "minFrequencyMHz": 100}}], sig)
    assert not trust.verify(key, "uid-1", [{**back[0], "envelope": {
        **back[0]["envelope"], "maxBusyBefore": 1}}], sig)


def test_a_go_ahead_is_the_operators_for_one_attempt_of_one_run():
    """A session on standby takes its board only on a go-ahead the operator signed for its run
    and attempt: a tenant's own, one copied from another run or an earlier attempt, is none."""
    key = b"k" * 32
    go = trust.sign_go_ahead(key, "uid-1", 2)
    assert GoAhead.model_validate(go).attempt == 2
    assert trust.has_go_ahead(key, "uid-1", 2, go)
    assert not trust.has_go_ahead(key, "uid-1", 3, go)                 # a re-queued attempt
    assert not trust.has_go_ahead(key, "uid-2", 2, go)                 # another run's
    assert not trust.has_go_ahead(key, "uid-1", 2, {**go, "signature": "0" * 64})
    assert not trust.has_go_ahead(b"x" * 32, "uid-1", 2, go)
    assert not trust.has_go_ahead(key, "uid-1", 2, None)
    assert not trust.has_go_ahead(key, "uid-1", 2, "yes")
    # the suites' signature is not a go-ahead, nor the other way round
    assert not trust.has_go_ahead(key, "uid-1", 2, {"attempt": 2,
                                                     "signature": trust.sign(key, "uid-1", [])})


def test_a_relay_is_the_operators_for_one_seat_and_is_no_go_ahead_on_its_own():
    """A relay (`api.grants.Relay`) names the seat a standby session takes when its holder
    releases the place: the signature covers the place and the holder, so a tenant cannot point
    its session at a seat that frees sooner, nor turn the relay into a go-ahead by dropping it."""
    from benchfarm.api.grants import Relay
    key = b"k" * 32
    after = Relay(place="board-7", holder="benchfarm/run-uid-0")
    go = trust.sign_go_ahead(key, "uid-1", 2, after)
    read = trust.read_go_ahead(key, "uid-1", 2, go)
    assert read is not None and read.after == after
    assert not trust.has_go_ahead(key, "uid-1", 2, go)                 # it waits for the seat
    assert trust.read_go_ahead(key, "uid-1", 3, go) is None
    assert trust.read_go_ahead(key, "uid-2", 2, go) is None
    for forged in ({**go, "after": {**go["after"], "place": "board-8"}},
                   {**go, "after": {**go["after"], "holder": "benchfarm/run-uid-9"}},
                   {**go, "after": None}, {**go, "after": "board-7"},
                   {**go, "after": {**go["after"], "extra": 1}}):
        assert trust.read_go_ahead(key, "uid-1", 2, forged) is None, forged
        assert not trust.has_go_ahead(key, "uid-1", 2, forged)
    plain = trust.sign_go_ahead(key, "uid-1", 2)
    assert trust.read_go_ahead(key, "uid-1", 2, plain).after is None    # type: ignore[union-attr]
    legacy = {"attempt": 2, "signature": plain["signature"]}   # an operator before relays wrote
    assert trust.has_go_ahead(key, "uid-1", 2, legacy)


def test_a_relay_fires_once_when_the_coordinator_shows_its_holder_gone():
    """The standby session's labgrid client watches the relay's place among the updates the
    coordinator sends every client: an update of it still held by the holder (a tag change) is
    nothing, one held by nobody or by someone else is the seat, once; other places are nothing."""
    from benchfarm.lab.labgrid_client import IndexedSession
    fired: list[str] = []
    watcher = type("Watcher", (), {"_relayed": IndexedSession._relayed})()
    watcher.relays = {"board-7": ("benchfarm/run-a", lambda: fired.append("board-7"))}
    watcher.holders = {}
    watcher._relayed("board-8", None)
    watcher._relayed("board-7", "benchfarm/run-a")
    assert fired == []
    watcher._relayed("board-7", None)
    assert fired == ["board-7"] and watcher.relays == {}
    watcher._relayed("board-7", None)
    assert fired == ["board-7"]
    watcher.relays["board-9"] = ("benchfarm/run-b", lambda: fired.append("board-9"))
    watcher._relayed("board-9", "benchfarm/run-c")      # taken back by another: the seat is gone
    assert fired == ["board-7", "board-9"]
    assert watcher.holders == {"board-7": None, "board-8": None, "board-9": "benchfarm/run-c"}


def test_a_relay_named_after_its_seat_was_given_up_fires_at_once():
    """The relay reaches the standby session in its run's status, after the coordinator's
    updates: if one of them already showed the seat's place given up, the relay fires when it
    is registered; if the place is still the holder's, or unheard of, it waits for an update."""
    from benchfarm.lab.coordinator import Coordinator
    c = Coordinator("127.0.0.1:1")      # never connects: only its loop runs
    try:
        c._session = SimpleNamespace(holders={"gone": None, "kept": "benchfarm/run-a"})
        fired = {name: threading.Event() for name in ("gone", "kept", "unheard")}
        for name, ev in fired.items():
            c.on_release(name, "benchfarm/run-a", ev.set)
        assert fired["gone"].wait(5)
        c._call(asyncio.sleep(0))                        # the loop ran every registration
        assert not fired["kept"].is_set() and not fired["unheard"].is_set()
        assert set(c._relays) == {"kept", "unheard"}
    finally:
        c.close()


def test_a_status_count_of_attempts_that_is_no_count_reads_as_none():
    """Both programs read `status.attempts` in loops that serve every run (the scheduling
    round, supervision): whatever someone else wrote there, it is a number or the default."""
    from benchfarm.api.outcomes import attempt_of
    assert attempt_of({"attempts": 3}) == 3 and attempt_of({"attempts": "4"}) == 4
    for junk in (None, "three", [1], {"a": 1}, True, 0, ""):
        assert attempt_of({"attempts": junk}) == 0 and attempt_of({"attempts": junk}, 1) == 1
    assert attempt_of({}) == 0


def test_standby_sessions_only_where_sessions_are_limited():
    from benchfarm.settings import Settings

    def standby(env):
        return Settings.from_env(env).standby_sessions
    assert standby({}) == 0
    assert standby({"BENCHFARM_MAX_SESSIONS": "12"}) == 12
    assert standby({"BENCHFARM_MAX_SESSIONS": "1"}) == 1
    assert standby({"BENCHFARM_MAX_SESSIONS": "12", "BENCHFARM_STANDBY_SESSIONS": "0"}) == 0
    assert standby({"BENCHFARM_MAX_SESSIONS": "12", "BENCHFARM_STANDBY_SESSIONS": "5"}) == 5
    assert standby({"BENCHFARM_STANDBY_SESSIONS": "5"}) == 0      # no limit: nobody waits


def test_the_scheduling_thread_is_time_shared_unless_the_lab_asks():
    from benchfarm.settings import SettingError, Settings

    def rtprio(env):
        return Settings.from_env(env).scheduler_rtprio
    assert rtprio({}) == 0
    assert rtprio({"BENCHFARM_SCHEDULER_RTPRIO": "1"}) == 1
    with pytest.raises(SettingError, match="BENCHFARM_SCHEDULER_RTPRIO='500': from 0 to 99"):
        rtprio({"BENCHFARM_SCHEDULER_RTPRIO": "500"})      # beyond the kernel's top
    with pytest.raises(SettingError, match="BENCHFARM_SCHEDULER_RTPRIO='-3'"):
        rtprio({"BENCHFARM_SCHEDULER_RTPRIO": "-3"})


# -- admission --------------------------------------------------------------------------------
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
                         store=SimpleNamespace(config=SimpleNamespace(bucket=BUCKET)),
                         internal=INTERNAL, signing_key=b"k" * 32, wake=lambda: None)
    body = {"metadata": {"namespace": "team-a", "name": "r1", "uid": "u-1", "generation": 1},
            "spec": {"selector": {"deviceType": "t"}, "plan": "p", **spec}}
    admission.admit(rt, body)
    return rt.kube.patches[-1]


def test_admission_refuses_software_the_namespace_may_not_reach_at_once():
    software = {"kernel": {"url": f"s3://{BUCKET}/probe-b/x/metrics.json", "sha256": DIGEST}}
    status = admit({"software": software},
                   {"namespaces": [{"namespace": "team-a", "allowSoftware": True}]})
    cond = status["conditions"][0]
    assert status["phase"] == "Failed" and cond["reason"] == "ArtifactForbidden"
    assert "probe-b/x/metrics.json" in cond["message"] and "team-a/" in cond["message"]
    status = admit({"software": software}, {})
    assert status["conditions"][0]["reason"] == "SoftwareNotAllowed"


def test_admission_signs_the_suites_and_records_the_prefix():
    software = {"kernel": {"url": f"s3://{BUCKET}/builds/Image", "sha256": DIGEST}}
    status = admit({"software": software, "artifactPrefix": "nightly"},
                   {"namespaces": [{"namespace": "team-a", "allowSoftware": True,
                                    "softwareSources": ["builds/"]}]})
    assert status["phase"] == "Pending" and status["storePrefix"] == "team-a/r1/u-1/nightly"
    assert trust.verify(b"k" * 32, "u-1", status["resolvedSuites"],
                        status["resolvedSuitesSignature"])


# -- fetch time: the session checks again, after resolution and on every redirect --------------
@pytest.fixture(scope="module")
def redirector():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(302)
            self.send_header("Location", self.path[len("/to/"):])
            self.end_headers()

        def log_message(self, *args):
            pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


def cache(tmp_path, **policy) -> SoftwareCache:
    return SoftwareCache(tmp_path, None, policy=NamespacePolicy(namespace="team-a", **policy),
                         namespace="team-a", settings=Settings.from_env())


def test_the_session_refuses_what_admission_would_have(tmp_path):
    with pytest.raises(RunError) as err:
        cache(tmp_path, allowSoftware=True).fetch_set(kernel(f"s3://{BUCKET}/probe-b/x"))
    assert err.value.reason == Refusal.artifactForbidden


def test_a_literal_loopback_url_is_refused_before_any_connection(tmp_path, redirector):
    with pytest.raises(RunError) as err:
        cache(tmp_path, allowSoftware=True, softwareHosts=["127.0.0.1"]).fetch_set(
            kernel(f"http://127.0.0.1:{redirector}/Image"))
    assert err.value.reason == Refusal.artifactForbidden and "loopback" in err.value.message


def test_an_allowed_name_that_resolves_to_loopback_is_refused(tmp_path, redirector, caplog):
    """Refused before any connection, with the one answer a tenant gets for any URL the lab
    did not fetch (what the name resolved to is the lab's log's, not the tenant's)."""
    url = f"http://localhost:{redirector}/Image"
    with pytest.raises(RunError) as err:
        cache(tmp_path, allowSoftware=True, softwareHosts=["localhost"]).fetch_set(kernel(url))
    assert err.value.reason == Refusal.artifactUnavailable
    assert url in err.value.message and "127.0.0.1" not in err.value.message
    assert "127.0.0.1 is a loopback address" in caplog.text


def test_a_name_that_resolves_to_a_private_address_is_refused_before_any_connection(
        tmp_path, caplog):
    """`10.1.257` is a host name to the LabPolicy (listed as such) and 10.1.1.1 to the
    resolver (inet_aton's short form, no DNS query): refused after resolution, nothing sent."""
    with pytest.raises(RunError) as err:
        cache(tmp_path, allowSoftware=True, softwareHosts=["10.1.257"]).fetch_set(
            kernel("http://10.1.257/Image"))
    assert err.value.reason == Refusal.artifactUnavailable and "10.1.1.1" not in str(err.value)
    assert "10.1.1.1 is a private address" in caplog.text


def test_every_redirect_is_checked(tmp_path, redirector, monkeypatch, caplog):
    # the redirector stands for an allowed host on the internet; where it points is checked
    monkeypatch.setattr(SoftwareReach, "address_problem", lambda self, address, port: None
                        if address.is_loopback else "not this one")
    c = cache(tmp_path, allowSoftware=True, softwareHosts=["localhost", "169.254.169.254"])
    for target, why in (("http://evil.example.net/x", "not on the namespace's allow-list"),
                        ("http://169.254.169.254/latest/", "not this one"),
                        (f"ftp://localhost:{redirector}/x", "another scheme")):
        caplog.clear()
        with pytest.raises(RunError) as err:
            c.fetch("kernel", Artifact(url=f"http://localhost:{redirector}/to/{target}",
                                       sha256=DIGEST))
        assert err.value.reason == Refusal.artifactUnavailable and why not in str(err.value)
        assert why in caplog.text, caplog.text
