"""Issue 57 on the real stack: BenchmarkBisections on the arm64 board with the deterministic clock
(vb-icount-0), their builds Debian's cloud kernel booted through U-Boot, the slower ones with
`slub_debug=P` (hackbench 15-20 % slower). make test: a team that may not boot its own software
gets no step run (the chaos suite bisects through an operator and a session kill);
the full variant (make bisection): 16 candidates and the bad build with the slowdown from the
11th, the same with an unbootable build on the search's path, and with no slowdown at all; the
shipped example as it is."""

from __future__ import annotations

import pytest
import yaml

import benchfarm_devlab as devlab
from tests.stack.bisections import answered, bisection, install
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, unique

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def custom(kube, operator):
    from kubernetes import client
    install()
    return client.CustomObjectsApi(kube)


@pytest.mark.full
@pytest.mark.parametrize("case", ["slower from the 11th", "the 9th unbootable", "no slowdown"])
def test_sixteen_candidates_and_the_bad_build(custom, case):
    """The issue's bisections: 17 builds after the good one (16 candidates, the bad one last);
    the 9th is the search's first step (the middle), so an unbootable 9th is met and skipped."""
    name = unique("bisect16")
    slower = None if case == "no slowdown" else 11
    apply(yaml.safe_dump(bisection(name, 17, slower, unbootable=9 if "9th" in case else None)))
    st = answered(custom, name, timeout=3600)["status"]
    assert st["phase"] == "Succeeded", st
    print(f"\n{case}: {len(st['steps'])} steps, {st['pairs']} pairs, {st['boardSeconds']:.0f} s "
          f"of board time: {[(s['name'], s['verdict'], s.get('pairs')) for s in st['steps']]}")
    if slower is None:
        assert st["answer"]["kind"] == "NoChange" and "firstBad" not in st["answer"]
        return
    assert st["answer"]["firstBad"] == "b11" and st["answer"]["kind"] == "Culprit", st["answer"]
    skipped = [s["name"] for s in st["steps"] if s["verdict"] == "skip"]
    assert skipped == (["b9"] if "9th" in case else [])
    assert len(st["steps"]) <= 5 + len(skipped) and len(st["steps"]) <= st["maxSteps"]


@pytest.mark.full
def test_the_example_names_its_culprit_and_prints_its_record(custom):
    """testplans/examples/bisection.yaml as shipped: four builds, b2 the first with slub_debug."""
    from kubernetes import client

    from tests.stack.bisections import EXAMPLE, get, record
    try:                                # one left by an earlier run of this test, with its runs
        custom.delete_namespaced_custom_object(GROUP, VERSION, "default", "benchmarkbisections",
                                               "slub-poison")
    except client.ApiException as exc:
        assert exc.status == 404

    def gone():
        try:
            get(custom, "slub-poison")
        except client.ApiException as exc:
            return exc.status == 404
        return False
    wait_for("no earlier slub-poison", gone, timeout=120)
    apply(EXAMPLE.read_text())
    st = answered(custom, "slub-poison", timeout=1800)["status"]
    print(f"\nthe example: {len(st['steps'])} steps, {st['pairs']} pairs, "
          f"{st['boardSeconds']:.0f} s of board time")
    assert (st["answer"]["kind"], st["answer"]["firstBad"]) == ("Culprit", "b2"), st
    assert len(st["steps"]) <= 3
    log = record("slub-poison")
    assert log.splitlines()[-1].startswith("# first bad commit: [b2] ") and \
        "git bisect good cloud\n" in log


def test_a_namespace_that_may_not_boot_its_own_software_gets_no_step_run(custom):
    """Team B (no allowSoftware in the LabPolicy) bisects team A's builds: the first step's run
    is refused its software like any run of team B's, and the bisection fails on it."""
    ns = "bisect-team-b"
    devlab.kubectl("create", "namespace", ns, check=False, capture=True)
    body = bisection("other-team", 3, slower_from=2)
    body["metadata"]["namespace"] = ns
    apply(yaml.safe_dump(body))
    try:
        st = wait_for("team B's bisection failed", lambda: (
            s if (s := custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, "benchmarkbisections", "other-team").get("status", {})
            ).get("phase") == "Failed" else None), timeout=120, every=1)
        condition = next(c for c in st["conditions"] if c["type"] == "Succeeded")
        assert condition["reason"] == "RunFailed" and "SoftwareNotAllowed" in condition["message"]
        runs = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkruns")["items"]
        assert [r.get("status", {}).get("board") for r in runs] == [None]   # it never got a board
    finally:
        devlab.kubectl("delete", "namespace", ns, "--wait=false", check=False, capture=True)


def test_a_template_over_revisions_is_checked_at_admission_and_each_step_runs_its_revisions_files(
        custom):
    """The API server refuses a template that names no {rev}, a revision twice and the good one
    among the others; an admitted one's step run stages its revision's own files and digest
    (team B's: refused its software like any run of team B's, before any board)."""
    from kubernetes import client
    ns = "bisect-team-b-rev"
    devlab.kubectl("create", "namespace", ns, check=False, capture=True)
    base = "s3://benchfarm-artifacts/builds/qemu-arm64/{rev}/"
    body = bisection("by-revision", 1, slower_from=None)
    body["metadata"].update(namespace=ns)
    spec = {k: v for k, v in body["spec"].items() if k not in ("good", "builds")}
    template = {"kernel": {"url": base + "vmlinuz", "sha256Url": base + "SHA256SUMS"}}
    try:
        for wrong, message in (
                ({"template": {"kernel": {"url": "s3://benchfarm-artifacts/vmlinuz",
                                          "sha256Url": "s3://benchfarm-artifacts/SHA256SUMS"}},
                  "goodRevision": "r0", "revisions": ["r1"]}, "name no {rev}"),
                ({"template": template, "goodRevision": "r0", "revisions": ["r1", "r1"]},
                 "Duplicate value"),
                ({"template": template, "goodRevision": "r0", "revisions": ["r1", "r0"]},
                 "not one of them"),
                ({"template": template, "goodRevision": "r0", "revisions": ["r1"],
                  "good": body["spec"]["good"]}, "give good and builds, or template")):
            with pytest.raises(client.ApiException) as refused:
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkbisections", {
                    **body, "spec": {**spec, **wrong}})
            assert refused.value.status == 422 and message in refused.value.body, refused.value.body
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkbisections", {
            **body, "spec": {**spec, "template": template, "goodRevision": "r0",
                             "revisions": ["r1", "r2", "r3"]}})
        st = wait_for("the templated bisection failed", lambda: (
            s if (s := custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, "benchmarkbisections", "by-revision").get("status", {})
            ).get("phase") == "Failed" else None), timeout=120, every=1)
        assert "SoftwareNotAllowed" in next(
            c for c in st["conditions"] if c["type"] == "Succeeded")["message"]
        [run] = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkruns")["items"]
        revision = ["r1", "r2", "r3"][int(run["metadata"]["labels"]["benchfarm.io/bisection-build"])]
        assert run["spec"]["software"]["kernel"] == {
            "url": base.format(rev="r0") + "vmlinuz", "sha256Url": base.format(rev="r0") + "SHA256SUMS"}
        assert run["spec"]["softwareB"] == {"name": revision, "kernel": {
            "url": base.format(rev=revision) + "vmlinuz",
            "sha256Url": base.format(rev=revision) + "SHA256SUMS"}}
        assert st["steps"][0]["name"] == revision
    finally:
        devlab.kubectl("delete", "namespace", ns, "--wait=false", check=False, capture=True)
