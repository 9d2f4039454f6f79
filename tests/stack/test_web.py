"""The dashboard in a real Chromium (Debian's chromium and chromium-driver, driven by Selenium), as
a person uses it: real BenchmarkRuns in two namespaces, a person whose ServiceAccount token
(TokenRequest) is bound to one of them signs in, reads the lab, the runs, the history chart (its
points and change-point marker), follows a point to the run, its report and an artifact, and
finds nothing of the other namespace, on any page or URL. Screenshots under
$BENCHFARM_STATE/screenshots/web-<time>/ (the path is printed).

The history comes from tests/stack/webhistory.py (the runs' own metrics, a declared change point)
until the results database is merged; the lab's own `benchfarm web` process (BENCHFARM_WEB_URL)
is checked over HTTP.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

import benchfarm_devlab as devlab
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, PersonLock, finished, unique
from tests.stack.webhistory import BUILD_LABEL

pytestmark = pytest.mark.stack
REPO = Path(__file__).resolve().parents[2]
NS_A, NS_B = "web-a", "web-b"
METRIC = "cyclictest/cyclictest-max (us)"
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1366,900"]


def _person(core, rbac, ns: str) -> str:
    """A ServiceAccount token bound (RoleBinding) to reading BenchmarkRuns in `ns` only."""
    from kubernetes import client
    for create, body in (
            (core.create_namespace, {"metadata": {"name": ns}}),):
        try:
            create(body)
        except client.ApiException as exc:
            assert exc.status == 409
    for create, body in (
            (core.create_namespaced_service_account, {"metadata": {"name": "viewer"}}),
            (rbac.create_namespaced_role, {"metadata": {"name": "run-reader"}, "rules": [
                {"apiGroups": [GROUP], "resources": ["benchmarkruns"],
                 "verbs": ["get", "list", "watch"]}]}),
            (rbac.create_namespaced_role_binding, {
                "metadata": {"name": "viewer-reads-runs"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                            "name": "run-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}]})):
        try:
            create(ns, body)
        except client.ApiException as exc:
            assert exc.status == 409
    return core.create_namespaced_service_account_token(
        "viewer", ns, {"spec": {"expirationSeconds": 3600}}).status.token


def _run(name: str, ns: str, plan: str, build: str, **spec) -> str:
    return yaml.safe_dump({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
        "metadata": {"name": name, "namespace": ns, "labels": {BUILD_LABEL: build}},
        "spec": {"selector": {"deviceType": "qemu-x86"}, "plan": plan, "iterations": 3, **spec}})


def _delete(custom, ns: str, name: str) -> None:
    from kubernetes import client
    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "benchmarkruns", name)
    except client.ApiException as exc:
        assert exc.status == 404


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=30) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location") or exc.read().decode(errors="replace")
    except urllib.error.URLError as exc:        # not listening (yet)
        return 0, str(exc.reason)


@pytest.fixture(scope="module")
def site(lab, kube, operator):
    from kubernetes import client
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    tokens = {ns: _person(core, rbac, ns) for ns in (NS_A, NS_B)}
    plan = unique("webtest")
    apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "TestPlan",
                          "metadata": {"name": plan}, "spec": {"suites": [
                              {"name": "cyclictest", "suite": "cyclictest", "timeoutSeconds": 60,
                               "command": "cyclictest -m -t1 -p99 -i1000 -l200 -q"}]}}))
    runs = {"a1": (unique("wa1"), NS_A, "b1", {}), "a2": (unique("wa2"), NS_A, "b1", {}),
            "b1": (unique("wb1"), NS_B, "b1", {}),
            "a3": (unique("wa3"), NS_A, "b2", {"bootCycles": 3})}
    for name, ns, build, spec in runs.values():      # two boards: two rounds
        apply(_run(name, ns, plan, build, **spec))
    ended = {}
    for name, ns, _, _ in runs.values():
        st = finished(custom, name, ns, timeout=300)
        assert st["phase"] == "Succeeded"
        ended[f"{ns}/{name}"] = st["completionTime"]
    port = _free_port()
    env = {**os.environ, **devlab.lab_env(),
           "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    shots = devlab.STATE / "screenshots" / time.strftime("web-%Y%m%d-%H%M%S")
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {shots}")
    with open(shots / "benchfarm-web.log", "wb") as log:
        web = subprocess.Popen([sys.executable, "-m", "benchfarm.cli", "web", "--port", str(port),
                                "--history-source", "tests.stack.webhistory:source"], env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("benchfarm web", lambda: _http(url + "/healthz")[0] == 200, timeout=60)
        yield {"url": url, "tokens": tokens, "plan": plan, "custom": custom, "shots": shots,
               "runs": {k: f"{v[1]}/{v[0]}" for k, v in runs.items()},
               "in_time_order": sorted(ended, key=lambda r: (ended[r], r))}
    finally:
        web.terminate()
        web.wait(10)
        for name, ns, _, _ in runs.values():
            _delete(custom, ns, name)
        custom.delete_cluster_custom_object(GROUP, VERSION, "testplans", plan)


@pytest.fixture(scope="module")
def browser(site):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="benchfarm-chromium-")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _shot(driver, site, name: str) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1366, min(max(900, height), 4000))
    time.sleep(0.5)                          # frames painted again at the new size
    driver.save_screenshot(str(site["shots"] / f"{name}.png"))
    driver.set_window_size(1366, 900)


def _sign_in(driver, site, ns: str = NS_A) -> None:
    from selenium.webdriver.common.by import By
    driver.delete_all_cookies()
    driver.get(site["url"] + "/runs")
    assert driver.current_url.startswith(site["url"] + "/signin")
    driver.find_element(By.ID, "token").send_keys(site["tokens"][ns])
    driver.find_element(By.ID, "signin").click()
    wait_for("the runs page", lambda: urllib.parse.urlparse(driver.current_url).path == "/runs",
             timeout=30)
    assert driver.find_element(By.ID, "who").text == f"system:serviceaccount:{ns}:viewer"


def _text(driver, element_id: str) -> str:
    """An element's text read in one script: the page may replace the element between a
    find_element and its .text (seen in CI: "Node with given id does not belong to the document")."""
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.textContent : '';",
        element_id)


def _rows(driver, selector: str, attr: str = "data-run") -> list[str]:
    from selenium.webdriver.common.by import By
    return [e.get_attribute(attr) for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def test_the_labs_web_process_takes_kubernetes_tokens_and_shows_one_namespace(site):
    url = devlab.lab_env()["BENCHFARM_WEB_URL"]
    assert _http(url + "/healthz") == (200, "ok")
    status, where = _http(url + "/runs")
    assert status == 302 and where.startswith("/signin")
    assert _http(url + "/runs", "not-a-token")[0] == 401
    status, page = _http(url + "/runs", site["tokens"][NS_A])
    assert status == 200 and site["runs"]["a1"] in page and site["runs"]["b1"] not in page
    assert _http(f"{url}/runs/{site['runs']['b1']}", site["tokens"][NS_A])[0] == 404


def test_a_person_follows_the_history_chart_to_a_run_its_report_and_an_artifact(site, browser):
    from selenium.webdriver.common.by import By
    d, runs = browser, site["runs"]
    _sign_in(d, site)
    listed = _rows(d, "tr.run")
    assert {runs["a1"], runs["a2"], runs["a3"]} <= set(listed)
    assert not [r for r in listed if r.startswith(NS_B + "/")]
    _shot(d, site, "1-runs")
    d.get(site["url"] + "/runs?" + urllib.parse.urlencode({"q": runs["a3"].split("/")[1]}))
    assert _rows(d, "tr.run") == [runs["a3"]]

    d.get(site["url"] + "/history")
    from selenium.webdriver.support.ui import Select
    for name, value in (("metric", METRIC), ("deviceType", "qemu-x86"), ("plan", site["plan"])):
        Select(d.find_element(By.ID, f"series-{name}")).select_by_visible_text(value)
    d.find_element(By.ID, "show").click()
    wait_for("the series", lambda: site["plan"] in _text(d, "series-title"), timeout=30)
    points = _rows(d, "svg.history circle.point")
    assert points == [r for r in site["in_time_order"] if r.startswith(NS_A + "/")]
    markers = _rows(d, "svg.history g.change-point")
    assert markers == [runs["a3"]]
    bands = d.find_elements(By.CSS_SELECTOR, "svg.history line.whisker")
    assert len(bands) == 3 and all(float(b.get_attribute("y2")) >= float(b.get_attribute("y1"))
                                   for b in bands)
    _shot(d, site, "2-history")
    d.find_element(By.CSS_SELECTOR, f'circle.point[data-run="{runs["a2"]}"]').click()
    wait_for("the run page", lambda: d.current_url.endswith("/runs/" + runs["a2"]), timeout=30)
    assert d.find_element(By.ID, "phase").text == "Succeeded"
    assert "Succeeded" in _rows(d, "table.conditions td", "textContent")
    assert d.find_elements(By.CSS_SELECTOR, "tr.event")
    artifacts = {a.text: a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR,
                                                                          "a.artifact")}
    assert {"serial.log", "metrics.json", "report.html"} <= set(artifacts)
    d.switch_to.frame(d.find_element(By.ID, "report"))
    assert runs["a2"] in d.find_element(By.TAG_NAME, "h1").text
    d.switch_to.default_content()
    _shot(d, site, "3-run")
    d.get(artifacts["serial.log"])
    assert "Kernel command line" in d.find_element(By.TAG_NAME, "body").text

    d.get(site["url"] + "/compare?" + urllib.parse.urlencode(
        {"namespace": NS_A, "deviceType": "qemu-x86", "plan": site["plan"], "a": "b1",
         "b": "b2"}))
    compared = _rows(d, "tr.compared td:first-child", "textContent")
    assert METRIC in compared
    _shot(d, site, "4-compare")


def test_the_reports_boot_timeline_keeps_one_colour_per_stage_and_its_legend_off_the_bars(
        site, browser):
    d = browser
    _sign_in(d, site)
    d.get(f"{site['url']}/runs/{site['runs']['a3']}/artifacts/report.html")
    got = d.execute_script("""
        const box = e => { const r = e.getBoundingClientRect();
                           return [r.left, r.top, r.right, r.bottom]; };
        const bars = {};
        for (const g of document.querySelectorAll('g[id^="boot"]')) {
          const m = /^boot(\\d+)-(.+)$/.exec(g.id);
          if (m) bars[g.id] = {stage: m[2], fill: getComputedStyle(g.querySelector('path')).fill,
                               box: box(g)};
        }
        const legend = document.getElementById('boot-legend');
        const keys = [...legend.querySelectorAll('path')].map(p => getComputedStyle(p).fill)
                       .filter(f => f !== 'none');
        const names = [...legend.querySelectorAll('text')].map(t => t.textContent.trim());
        return {bars, keys, names, legend: box(legend),
                axes: box(document.getElementById('boot-axes'))};""")
    stages = {}
    for bar in got["bars"].values():
        stages.setdefault(bar["stage"], set()).add(bar["fill"])
    assert {k for k in got["bars"] if k.startswith("boot3-")}, "three boots drawn"
    assert all(len(f) == 1 for f in stages.values()), stages        # one colour per stage
    assert dict(zip(got["names"], got["keys"], strict=True)) == \
        {s: f.pop() for s, f in stages.items()}                       # and the legend's the same

    def overlap(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    assert not overlap(got["legend"], got["axes"])
    assert not [k for k, b in got["bars"].items() if overlap(got["legend"], b["box"])]
    _shot(d, site, "5-report")


def test_another_namespaces_runs_are_nowhere_to_be_seen(site, browser):
    from selenium.webdriver.common.by import By
    d, other = browser, site["runs"]["b1"]
    _sign_in(d, site)
    d.get(site["url"] + "/runs?namespace=" + NS_B)
    assert _rows(d, "tr.run") == []
    for path in (f"/runs/{other}", f"/runs/{other}/artifacts/serial.log",
                 f"/runs/{other}/artifacts/report.html"):
        status, _ = _http(site["url"] + path, site["tokens"][NS_A])
        assert status == 404, path
        d.get(site["url"] + path)
        assert "no run" in d.find_element(By.TAG_NAME, "body").text
    d.get(site["url"] + "/history?" + urllib.parse.urlencode(
        {"metric": METRIC, "deviceType": "qemu-x86", "plan": site["plan"]}))
    assert other not in d.page_source
    _sign_in(d, site, NS_B)                   # the other person sees theirs, and not the first's
    theirs = _rows(d, "tr.run")
    assert other in theirs and all(r.startswith(NS_B + "/") for r in theirs)


def test_the_lab_page_shows_a_board_held_by_a_person_and_each_namespaces_queue(site, browser):
    from selenium.webdriver.common.by import By
    d, custom = browser, site["custom"]
    _sign_in(d, site)
    queued = {NS_A: unique("wq"), NS_B: unique("wq")}
    with PersonLock("vb-x86-1"):
        try:
            def board_row():
                d.get(site["url"] + "/lab")
                rows = d.find_elements(By.CSS_SELECTOR, 'tr.board[data-board="vb-x86-1"]')
                return rows[0] if rows else None
            # the operator sees the lock on its next look at the coordinator; runs for the board
            # applied before would be launched and sent back to the queue (BoardTaken)
            wait_for("vb-x86-1 held by alice", lambda: "desk/alice" in board_row().text,
                     timeout=60, every=2)
            for ns, name in queued.items():
                apply(_run(name, ns, site["plan"], "b1", selector={"board": "vb-x86-1"}))
            wait_for("the queue", lambda: board_row() and d.find_elements(
                By.CSS_SELECTOR, "tr.queued"), timeout=60, every=2)
            row = d.find_element(By.CSS_SELECTOR, 'tr.board[data-board="vb-x86-1"]')
            assert "held by" in row.text and "desk/alice" in row.text
            assert "qemu-x86" in _rows(d, "section.device-type", "data-device-type")
            assert _rows(d, "table.queue", "data-namespace") == [NS_A]
            mine = d.find_element(By.CSS_SELECTOR, f'tr.queued[data-run="{NS_A}/{queued[NS_A]}"]')
            assert int(mine.find_element(By.CSS_SELECTOR, ".position").text) in (1, 2)
            assert "vb-x86-1 held by a person" in mine.find_element(By.CSS_SELECTOR, ".eta").text
            assert queued[NS_B] not in d.page_source
            _shot(d, site, "6-lab")
        finally:
            for ns, name in queued.items():
                _delete(custom, ns, name)
