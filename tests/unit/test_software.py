"""The software under test: the A/B step plan, the spec's sides, and fetching with verification
from a real HTTP server on loopback (digest given, digest published, wrong digest, 404, a host
that does not answer), and modules laid over an initrd."""

from __future__ import annotations

import functools
import hashlib
import http.server
import socket
import threading
import time
from pathlib import Path

import pytest

from benchfarm.api.labpolicy import NamespacePolicy
from benchfarm.api.runs import Artifact, BenchmarkRunSpec, SoftwareSet
from benchfarm.core import steps as st
from benchfarm.errors import RunError
from benchfarm.lab.deploy import with_modules
from benchfarm.settings import Settings
from benchfarm.store.software import SoftwareCache


def test_an_ab_plan_alternates_the_sides_and_boots_each_before_its_iteration():
    steps = st.plan_steps(1, ["x", "y"], iterations=2, warmup_iterations=1, sides=2)
    assert [s.name for s in steps] == [
        "it-001-a-boot", "provenance-a", "it-001-a-x", "it-001-a-y",
        "it-001-b-boot", "provenance-b", "it-001-b-x", "it-001-b-y",
        "it-002-a-boot", "it-002-a-x", "it-002-a-y", "it-002-b-boot", "it-002-b-x", "it-002-b-y",
        "it-003-a-boot", "it-003-a-x", "it-003-a-y", "it-003-b-boot", "it-003-b-x", "it-003-b-y"]
    assert {s.side for s in steps} == {"a", "b"}
    assert [s.warmup for s in steps if s.kind == st.SUITE][:4] == [True] * 4
    assert not any(s.warmup for s in steps if s.kind == st.SUITE and s.iteration > 1)
    assert st.raw_key("p", "x", 2, "b") == "p/raw/x/b/iteration-002.txt"
    # one side, with or without software: the plan of old
    assert st.plan_steps(2, ["x"], 1, 0, sides=1) == st.plan_steps(2, ["x"], 1, 0)


def test_the_spec_names_its_sides():
    kernel = {"url": "s3://b/k", "sha256": "0" * 64}
    one = BenchmarkRunSpec(selector={"deviceType": "t"}, plan="p", software={"kernel": kernel})
    assert [label for label, _ in one.software_sets()] == ["A"]
    ab = BenchmarkRunSpec(selector={"deviceType": "t"}, plan="p", software={"kernel": kernel},
                          softwareB={"name": "next", "kernel": kernel, "bootArgs": "a=1 b.c=x,y"})
    assert [label for label, _ in ab.software_sets()] == ["A", "next"]
    assert ab.softwareB.parts() == ["kernel", "bootArgs"]
    plain = BenchmarkRunSpec(selector={"deviceType": "t"}, plan="p")
    assert plain.software_sets() == [("", None)]
    with pytest.raises(ValueError):   # it goes through U-Boot's shell: no ; or $
        SoftwareSet(bootArgs="a=1; reset")
    with pytest.raises(ValueError):
        Artifact(url="ftp://host/k", sha256="0" * 64)


@pytest.fixture
def internet(monkeypatch):
    """The loopback server stands for a host on the internet: its address is allowed here only
    (test_isolation checks that loopback is refused)."""
    from benchfarm.core.policy.software import SoftwareReach
    monkeypatch.setattr(SoftwareReach, "address_problem", lambda self, address, port: None)


SETTINGS = Settings.from_env({})   # the defaults: a 4 GiB cache, no internal ranges


def cache_in(root: Path) -> SoftwareCache:
    policy = NamespacePolicy(namespace="team-a", allowSoftware=True, softwareHosts=["localhost"])
    return SoftwareCache(root, None, policy=policy, namespace="team-a", settings=SETTINGS)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "Image").write_bytes(b"kernel-bytes" * 1000)
    digest = hashlib.sha256((root / "Image").read_bytes()).hexdigest()
    (root / "SHA256SUMS").write_text(f"{'1' * 64}  other.bin\n{digest}  build/Image\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://localhost:{httpd.server_address[1]}", digest
    httpd.shutdown()


def test_a_file_is_fetched_verified_and_cached_by_its_digest(server, tmp_path, internet):
    base, digest = server
    cache = cache_in(tmp_path)
    got = cache.fetch("kernel", Artifact(url=f"{base}/Image", sha256=digest))
    assert got.sha256 == digest and got.size == 12000
    assert got.path.read_bytes() == b"kernel-bytes" * 1000
    assert got.path.name == f"{digest[:12]}-Image"    # unique beside the board's own files
    published = cache.fetch("kernel", Artifact(url=f"{base}/Image",
                                               sha256Url=f"{base}/SHA256SUMS"))
    assert published.path == got.path and published.provenance()["sha256"] == digest


@pytest.mark.parametrize("artifact, reason", [
    (lambda b: Artifact(url=f"{b}/Image", sha256="2" * 64), "DigestMismatch"),
    (lambda b: Artifact(url=f"{b}/missing", sha256="2" * 64), "ArtifactUnavailable"),
    (lambda b: Artifact(url=f"{b}/Image", sha256Url=f"{b}/Image"), "DigestMissing"),
    (lambda b: Artifact(url=f"http://localhost:{_closed_port()}/Image", sha256="2" * 64),
     "ArtifactUnavailable"),
])
def test_a_bad_artifact_is_the_runs_error_with_a_reason(server, tmp_path, internet, artifact,
                                                        reason):
    with pytest.raises(RunError) as err:
        cache_in(tmp_path).fetch("kernel", artifact(server[0]))
    assert err.value.reason == reason and "kernel" in err.value.message
    assert server[1] not in err.value.message     # a mismatch never tells the digest found
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]   # nothing unverified is kept


@pytest.fixture(scope="module")
def answers():
    """A loopback server that answers /403..., /404... and /500... with that status, /slow
    never, and anything else with the kernel's bytes."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path == "/slow":
                time.sleep(3)
                return
            first = self.path.split("/")[1]
            code = int(first) if first.isdigit() else 200
            body = b"kernel-bytes" * 1000 if code == 200 else b"internal detail"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://localhost:{httpd.server_address[1]}"
    httpd.shutdown()


def test_every_failed_download_gives_the_tenant_one_answer(answers, tmp_path, internet,
                                                           monkeypatch, caplog):
    """403, 404, 500, a refused connection, a timeout and a name that cannot be resolved: the
    same reason and the same words (only the URL the tenant wrote differs), so a run cannot
    tell a closed port from a missing file; the lab's log says which it was."""
    import benchfarm.store.software as sw
    monkeypatch.setattr(sw, "TIMEOUT", 0.5)
    policy = NamespacePolicy(namespace="team-a", allowSoftware=True,
                             softwareHosts=["localhost", "a..b"])
    cache = SoftwareCache(tmp_path, None, policy=policy, namespace="team-a", settings=SETTINGS)
    urls = {"HTTP 403": f"{answers}/403", "HTTP 404": f"{answers}/404",
            "HTTP 500": f"{answers}/500", "Connection refused":
            f"http://localhost:{_closed_port()}/Image", "timed out": f"{answers}/slow",
            "does not resolve": "http://a..b/Image"}
    said = set()
    for detail, url in urls.items():
        caplog.clear()
        with pytest.raises(RunError) as err:
            cache.fetch("kernel", Artifact(url=url, sha256="2" * 64))
        assert err.value.reason == "ArtifactUnavailable", (url, err.value)
        said.add(err.value.message.replace(url, "URL"))
        assert detail in caplog.text, (detail, caplog.text)
        assert "internal detail" not in err.value.message
    assert len(said) == 1, said


def test_the_cache_answers_only_for_a_url_that_yielded_the_file(answers, tmp_path, internet):
    """A digest alone proves nothing about who may read a file: a cached kernel is not served
    for another URL with the same digest (one with no such file, or one the namespace may not
    name), only for the URL that yielded it, and only while that URL is allowed."""
    digest = hashlib.sha256(b"kernel-bytes" * 1000).hexdigest()
    mine = NamespacePolicy(namespace="team-b", allowSoftware=True, softwareHosts=["localhost"])
    cached = SoftwareCache(tmp_path, None, policy=mine, namespace="team-b",
                           settings=SETTINGS).fetch(
        "kernel", Artifact(url=f"{answers}/Image", sha256=digest))
    assert cached.path.exists()
    thief = SoftwareCache(tmp_path, None, policy=NamespacePolicy(
        namespace="team-a", allowSoftware=True, softwareHosts=["localhost"]), namespace="team-a",
        settings=SETTINGS)
    with pytest.raises(RunError) as err:       # its own URL, no such file there
        thief.fetch("kernel", Artifact(url=f"{answers}/404/Image", sha256=digest))
    assert err.value.reason == "ArtifactUnavailable"
    with pytest.raises(RunError) as err:       # the very URL, no longer on its allow-list
        SoftwareCache(tmp_path, None, policy=NamespacePolicy(
            namespace="team-b", allowSoftware=True), namespace="team-b",
            settings=SETTINGS).fetch(
            "kernel", Artifact(url=f"{answers}/Image", sha256=digest))
    assert err.value.reason == "ArtifactForbidden"
    again = thief.fetch("kernel", Artifact(url=f"{answers}/Image", sha256=digest))
    assert again.path == cached.path           # the same URL, allowed: the cache answers


def test_a_cache_hit_waits_for_the_url_to_be_authorised_after_resolution(answers, tmp_path,
                                                                         internet, monkeypatch):
    """The file is in the cache from this very URL, but its host resolves now to an address
    the lab does not fetch from: refused before the cache is read, nothing sent."""
    from benchfarm.core.policy.software import SoftwareReach
    digest = hashlib.sha256(b"kernel-bytes" * 1000).hexdigest()
    cache = cache_in(tmp_path)
    artifact = Artifact(url=f"{answers}/Image", sha256=digest)
    cache.fetch("kernel", artifact)
    monkeypatch.setattr(SoftwareReach, "address_problem",
                        lambda self, address, port: f"{address} is a private address")
    with pytest.raises(RunError) as err:
        cache.fetch("kernel", artifact)
    assert err.value.reason == "ArtifactUnavailable"


def test_modules_are_appended_to_the_initrd_four_byte_aligned(tmp_path):
    (tmp_path / "initrd").write_bytes(b"12345")
    (tmp_path / "modules").write_bytes(b"MOD")
    out = with_modules(tmp_path / "initrd", tmp_path / "modules")
    assert out.read_bytes() == b"12345\0\0\0MOD"
    assert with_modules(tmp_path / "initrd", tmp_path / "modules") == out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _checkpoints(side: str, latencies: list[float], boot: float) -> list[dict]:
    from benchfarm.core.statistics.results import SuiteRecord
    from benchfarm.suites.base import Metric
    out = []
    for it, value in enumerate(latencies, start=1):
        out.append({"kind": st.BOOT, "side": side, "cycle": it, "phases": {"kernel-to-prompt": boot},
                    "events": {"first-byte": 0.1, "prompt": boot}, "powerOnWall": 0.0})
        if it == 1:
            out.append({"kind": st.PROVENANCE, "side": side,
                        "provenance": {"kernelRelease": f"6.1-{side}"}})
        record = SuiteRecord(step="lat", suite="cyclictest", iteration=it, warmup=False,
                             exit_code=0, seconds=1.0,
                             metrics=[Metric("cyclictest-avg", value, "us", False)])
        out.append({"kind": st.SUITE, "side": side, "record": record.as_dict()})
    return out


def test_an_ab_run_judges_b_against_a_and_reports_both_sides():
    from benchfarm.api.devicetype import BootSpec, DeviceType
    from benchfarm.api.runs import SuiteSpec
    from benchfarm.session import results as res
    got = res.Collected()
    for a, b in zip(_checkpoints("a", [10, 11, 10, 11, 10], 2.0),
                    _checkpoints("b", [14, 15, 14, 15, 14], 2.5), strict=False):
        got.add(a)
        got.add(b)
    dtype = DeviceType(name="t", labgrid="t.labgrid.yaml", boot=BootSpec())
    suites = [SuiteSpec(name="lat", suite="cyclictest", command="cyclictest")]
    run = {"namespace": "ns", "name": "ab", "board": "vb-a53-0", "deviceType": "t"}
    docs = res.build_ab(run, dtype, suites, got, {"a": "v1", "b": "v2"})
    status, reason, message = docs.regression
    assert (status, reason) == ("True", "MetricsRegressed")
    assert "B (v2)" in message and "A (v1)" in message
    assert set(docs.results) == {"v1", "v2"}
    assert docs.doc["sides"]["v2"]["provenance"] == {"kernelRelease": "6.1-b"}
    report = docs.files["report.md"][0].decode()
    assert "## A/B: B (v2) against A (v1)" in report and "| Metric | A (v1) | B (v2) |" in report
    assert "regressed" in report and set(docs.files) >= {"report.html", "report-b.html"}
