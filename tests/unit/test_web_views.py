"""The dashboard's pure parts: board states, the queue's order and estimated starts, run filters,
what a person may see of a history, and its chart."""

from __future__ import annotations

import re

import pytest

from benchfarm.web import charts, views
from benchfarm.web.history import visible

NOW = 1_800_000_000.0


def iso(t: float) -> str:
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def run(ns, name, phase="Pending", created=0.0, priority=100, dtype="qemu-x86", **status):
    return {"metadata": {"namespace": ns, "name": name, "creationTimestamp": iso(NOW + created)},
            "spec": {"selector": {"deviceType": dtype}, "plan": "p", "priority": priority},
            "status": {"phase": phase, **status}}


def board(name, state="Idle", run="", dtype="qemu-x86", **extra):
    return {"metadata": {"name": name}, "spec": {},
            "status": {"deviceType": dtype, "state": state, "run": run, **extra}}


def test_board_states_as_a_person_reads_them_and_runs_of_other_namespaces_unnamed():
    boards = [board("a", "Busy", "team-a/r1"), board("b", "Busy", "team-b/r2"),
              board("c", "Idle", "labgrid: desk/alice"), board("d", "Quarantined", reason="boot"),
              board("e", "Maintenance"), board("f"), board("g", "Offline"),
              board("h", "Idle", lease={"holder": "bob"}), board("x", dtype="other")]
    rows = views.board_rows(boards, lambda ns: ns == "team-a")
    assert list(rows) == ["other", "qemu-x86"]
    got = {r.name: (r.state, r.detail, r.run) for r in rows["qemu-x86"]}
    assert got == {"a": ("busy", "team-a/r1", "team-a/r1"),
                   "b": ("busy", "a run of another namespace", None),
                   "c": ("held", "held by desk/alice", None), "d": ("quarantined", "boot", None),
                   "e": ("maintenance", "drained", None), "f": ("idle", "", None),
                   "g": ("offline", "", None), "h": ("held", "held by bob", None)}


def test_the_queue_in_the_schedulers_order_with_starts_from_the_median_duration():
    done = [run("team-a", f"old{i}", "Succeeded", startTime=iso(NOW - 1000),
                completionTime=iso(NOW - 1000 + d)) for i, d in enumerate((100, 300, 200))]
    busy = run("team-a", "busy", "Running", startTime=iso(NOW - 50))
    waiting = [run("team-a", "a1", created=1), run("team-a", "a2", created=2),
               run("team-b", "b1", created=3), run("team-b", "hi", created=9, priority=500),
               run("team-b", "gpu", created=4, dtype="nothing-fits")]
    boards = [board("x0", "Busy", "team-a/busy"), board("x1"), board("q", "Quarantined")]
    rows = views.queue_rows([*done, busy, *waiting], boards, NOW)
    assert [(r.run, r.position) for r in rows] == [
        ("team-b/hi", 1), ("team-a/a1", 2), ("team-b/b1", 3), ("team-a/a2", 4),
        ("team-b/gpu", 5)]                    # priority first, then namespaces take turns
    eta = {r.run: r.estimated_start for r in rows}
    # median 200 s: x1 is free now, x0 in 150 s (busy for 50 s of its 200)
    assert eta == {"team-b/hi": NOW, "team-a/a1": NOW + 150, "team-b/b1": NOW + 200,
                   "team-a/a2": NOW + 350, "team-b/gpu": None}
    assert rows[-1].waits_for == "no board of the lab fits it"
    pinned = run("team-a", "pinned", created=5)
    pinned["spec"]["selector"] = {"board": "q"}
    assert views.queue_rows([pinned], boards, NOW)[0].waits_for == \
        "every board it fits is out: q quarantined"
    served_b_last = views.queue_rows(waiting[:3], boards, NOW, {"team-a": 1.0, "team-b": 2.0})
    assert [r.run for r in served_b_last] == ["team-a/a1", "team-b/b1", "team-a/a2"]


def test_runs_filtered_by_field_and_name_newest_first():
    rows = [views.run_row(r) for r in (run("a", "x-1", "Succeeded", created=1),
                                       run("a", "y-2", "Failed", created=2),
                                       run("b", "x-3", "Succeeded", created=3))]
    assert [r["key"] for r in views.filter_runs(rows, {"phase": "Succeeded"})] == ["b/x-3", "a/x-1"]
    assert [r["key"] for r in views.filter_runs(rows, {"namespace": "a", "q": "X"})] == ["a/x-1"]
    assert [r["key"] for r in views.filter_runs(rows, {})] == ["b/x-3", "a/y-2", "a/x-1"]


DOC = {"series": [{"run": f"{ns}/r{i}", "time": iso(NOW + i), "software": "b1" if i < 3 else "b2",
                   "board": "x0", "mean": 10.0 + i, "samples": [9.0 + i, 10.0 + i, 11.0 + i]}
                  for i, ns in enumerate(("a", "b", "a", "a", "b"))],
       "changePoints": [{"run": "a/r3", "software": "b2", "magnitude": 12.5, "pvalue": 0.001,
                         "direction": "regression"},
                        {"run": "b/r4", "software": "b2", "magnitude": 5.0, "pvalue": 0.01,
                         "direction": "improvement"}]}


def test_a_person_sees_only_their_namespaces_points_and_change_points():
    seen = visible(DOC, lambda ns: ns == "a")
    assert [p["run"] for p in seen["series"]] == ["a/r0", "a/r2", "a/r3"]
    assert [c["run"] for c in seen["changePoints"]] == ["a/r3"]


def test_the_chart_links_every_point_to_its_run_and_marks_the_change_point_before_it():
    svg = charts.history_svg(visible(DOC, lambda ns: ns == "a"), "us", lambda r: f"/runs/{r}")
    assert re.findall(r'href="(/runs/[^"]+)"', svg) == ["/runs/a/r0", "/runs/a/r2", "/runs/a/r3"]
    points = {m[0]: float(m[1]) for m in re.findall(r'data-run="([^"]+)" cx="([\d.]+)"', svg)}
    line = re.search(r'class="change-point regression" data-run="a/r3">.*?<line x1="([\d.]+)"',
                     svg)
    assert line and points["a/r2"] < float(line.group(1)) < points["a/r3"]
    assert "b/r" not in svg and 'class="band"' in svg
    from benchfarm.report.svg import nice_ticks
    assert nice_ticks(9.0, 14.0)[0] <= 9.0 and nice_ticks(9.0, 14.0)[-1] >= 14.0


def test_a_board_a_lease_holds_is_held_by_a_person_named_only_to_its_namespace():
    boards = [board("a", "Busy", "lease:team-a/debug"), board("b", "Busy", "lease:team-b/x")]
    got = {r.name: (r.state, r.detail, r.run)
           for r in views.board_rows(boards, lambda ns: ns == "team-a")["qemu-x86"]}
    assert got == {"a": ("held", "leased: team-a/debug", None),
                   "b": ("held", "leased by another namespace", None)}


def lease(ns, name, phase="Pending", created=0.0, duration="10m", **status):
    return {"metadata": {"namespace": ns, "name": name, "creationTimestamp": iso(NOW + created)},
            "spec": {"selector": {"deviceType": "qemu-x86"}, "duration": duration,
                     "user": "desk/alice"}, "status": {"phase": phase, **status}}


def test_leases_wait_in_the_same_queue_and_hold_their_board_for_their_duration():
    done = [run("team-a", "old", "Succeeded", startTime=iso(NOW - 1000),
                completionTime=iso(NOW - 800))]                       # runs take 200 s
    waiting = [run("team-a", "a1", created=1), run("team-a", "a2", created=3)]
    leases = [lease("team-c", "debug", created=2, duration="10m"),
              lease("team-c", "held", "Granted", expiresAt=iso(NOW + 60))]
    boards = [board("x0", "Busy", "lease:team-c/held"), board("x1")]
    rows = views.queue_rows([*done, *waiting], boards, NOW, leases=leases)
    assert [(r.run, r.lease, r.position) for r in rows] == [
        ("team-a/a1", False, 1), ("team-c/debug", True, 2), ("team-a/a2", False, 3)]
    eta = {r.run: r.estimated_start for r in rows}
    # x1 is free now and takes a1 (200 s); x0 frees when the granted lease expires (60 s) and
    # takes the queued lease for its 10 minutes; a2 gets x1 after a1
    assert eta == {"team-a/a1": NOW, "team-c/debug": NOW + 60, "team-a/a2": NOW + 200}


@pytest.mark.parametrize("asked", [
    "//evil.example/", "/\\evil.example/", "/\t/evil.example/", "/\n/evil.example/",
    "/\r\n/evil.example", " /lab", "/lab x", "https://evil.example/", "javascript:alert(1)",
    "evil.example", "", None, 7, "/\x00/evil.example", "/\x7f", "/ /evil.example", "/\u3000/x",
    "\\\\evil.example", "/runs\\..\\..\\evil",
])
def test_sign_in_sends_nowhere_but_a_path_on_this_site(asked):
    assert views.local_path(asked) == "/lab"


@pytest.mark.parametrize("asked", [
    "/lab", "/runs?q=nightly&phase=Failed", "/runs/team-a/r1/artifacts/report.html",
    "/history?metric=cyclictest%2Fmax+(us)", "/", "/runs#top", "/%2F%2Fevil.example",
])
def test_a_path_on_this_site_is_where_sign_in_goes(asked):
    assert views.local_path(asked) == asked


KEYS = [views.SeriesKey("team-a", "hb/hackbench-time", "qemu-x86", "(inline)"),
        views.SeriesKey("team-a", "boot/kernel-to-prompt", "qemu-x86", "(inline)"),
        views.SeriesKey("team-b", "hb/hackbench-time", "qemu-x86", "(inline)"),
        views.SeriesKey("team-b", "secret-step/secret-metric", "qemu-arm64-a53", "team-b-plan")]


def test_a_tenants_history_menus_hold_only_their_namespaces_series():
    """Team A's person, even when the source answers with team B's series too: team B's step
    names, device types and plans are in no menu, and asking for team B's series shows nothing."""
    mine = views.history_menus(KEYS, lambda ns: ns == "team-a", {})
    assert mine.namespaces == ["team-a"]
    assert mine.want == KEYS[1] and mine.known          # the namespace's first series
    assert mine.choices == {"metric": ["boot/kernel-to-prompt", "hb/hackbench-time"],
                            "device_type": ["qemu-x86"], "plan": ["(inline)"]}
    theirs = views.history_menus(KEYS, lambda ns: ns == "team-a", {
        "namespace": "team-b", "metric": "secret-step/secret-metric",
        "deviceType": "qemu-arm64-a53", "plan": "team-b-plan"})
    assert not theirs.known and theirs.want.namespace == ""
    assert "secret-step/secret-metric" not in str(theirs.choices) and \
        "team-b" not in theirs.namespaces


def test_a_lab_admin_chooses_the_namespace_and_its_menus_follow():
    admin = views.history_menus(KEYS, lambda ns: True, {"namespace": "team-b"})
    assert admin.namespaces == ["team-a", "team-b"]
    assert admin.want == KEYS[2] and admin.known
    assert admin.choices["metric"] == ["hb/hackbench-time", "secret-step/secret-metric"]
    one = views.history_menus(KEYS, lambda ns: True, {
        "namespace": "team-a", "metric": "hb/hackbench-time", "deviceType": "qemu-x86",
        "plan": "(inline)"})
    assert one.want == KEYS[0] and one.known and one.choices["plan"] == ["(inline)"]
    none = views.history_menus(KEYS, lambda ns: True, {
        "namespace": "team-a", "metric": "secret-step/secret-metric",
        "deviceType": "qemu-arm64-a53", "plan": "team-b-plan"})
    assert not none.known and none.want.namespace == "team-a"


def _bisect_points():
    p = [{"run": f"team-a/r{i}", "side": "", "software": s} for i, s in enumerate(
        ["v1", "v1", "v2", "v3", "v3", "v3"])]
    p.insert(3, {"run": "team-a/ab", "side": "B", "software": "v3"})
    return p


def test_a_change_points_bisection_runs_from_the_newest_other_build_to_its_own():
    points = _bisect_points()
    before, after = views.bisection_ends({"run": "team-a/r4"}, points)
    assert before == points[2] and after == points[5]          # v2 (not the A/B's B side: v3)
    kernel = {"url": "s3://benchfarm-artifacts/builds/v/Image", "sha256": "0" * 64}
    runs = {"team-a/r2": {"spec": {"software": {"name": "x", "kernel": kernel}}},
            "team-a/r4": {"spec": {"software": {"bootArgs": "slub_debug=P"}}}}
    key = views.SeriesKey("team-a", "hackbench/time (s)", "qemu-arm64", "hackbench")
    body, todo = views.bisection_draft(key, before, after, runs)
    assert body["kind"] == "BenchmarkBisection" and body["metadata"] == {
        "name": "bisect-r4", "namespace": "team-a"}
    assert body["spec"]["good"] == {"name": "v2", "kernel": kernel}
    assert body["spec"]["builds"] == [{"name": "v3", "bootArgs": "slub_debug=P"}]
    assert body["spec"]["selector"] == {"deviceType": "qemu-arm64"} and \
        body["spec"]["metric"] == "hackbench/time (s)" and body["spec"]["plan"] == "hackbench"
    assert todo == ["list the builds between them in order before the last (or give a template "
                    "and its revisions)"]
    from benchfarm.api.bisections import BenchmarkBisectionSpec
    assert BenchmarkBisectionSpec(**body["spec"]).builds[0].bootArgs == "slub_debug=P"


def test_a_bisection_from_a_b_side_and_the_boards_own_image_says_what_is_missing():
    points = _bisect_points()
    before, after = views.bisection_ends({"run": "team-a/ab"}, points)
    assert before == points[2] and after["side"] == "B"
    runs = {"team-a/ab": {"spec": {"software": {"bootArgs": "a"}, "softwareB": {"bootArgs": "b"}}}}
    body, todo = views.bisection_draft(views.SeriesKey("team-a", "m (s)", "d", "p"), before,
                                       after, runs)
    assert body["spec"]["builds"] == [{"name": "v3", "bootArgs": "b"}]
    assert body["spec"]["good"] == {"name": "v2"} and todo[0].startswith(
        "build v2 was the board's own image")
    first, after = views.bisection_ends({"run": "team-a/r0"}, points)
    body, todo = views.bisection_draft(views.SeriesKey("team-a", "m (s)", "d", "p"), first,
                                       after, {})
    assert first is None and todo[0].startswith("no run before the change point")
    assert [t for t in todo if "own image" in t] == ["build v1 was the board's own image: give "
                                                    "its files (kernel, initrd, dtb) or its bootArgs"]
    odd = {"run": "team-a/r9", "side": "", "software": "6.1 (cloud) #1"}
    assert views.bisection_draft(views.SeriesKey("team-a", "m (s)", "d", "p"), None, odd, {}
                                 )[0]["spec"]["builds"] == [{"name": "6.1-cloud-1"}]


def test_a_bisection_of_an_improvement_looks_for_the_build_that_made_it_better():
    points = _bisect_points()
    before, after = views.bisection_ends({"run": "team-a/r4"}, points)
    key = views.SeriesKey("team-a", "cyclictest/max (us)", "d", "p")
    body, todo = views.bisection_draft(key, before, after, {}, improvement=True,
                                       higher_is_better=False)
    assert body["spec"]["higherIsBetter"] is True and todo[0].startswith(
        "this change is an improvement")
    assert "higherIsBetter" not in views.bisection_draft(key, before, after, {})[0]["spec"]
