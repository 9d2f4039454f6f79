"""The dashboard in a real Chromium (Debian's chromium and chromium-driver, driven by Selenium), as
a person uses it: real BenchmarkRuns in two namespaces, a person whose ServiceAccount token
(TokenRequest) is bound to one of them signs in, reads the lab, the runs, the history chart (its
points and change-point marker), follows a point to the run, its report and an artifact, and
finds nothing of the other namespace, on any page or URL. Sign-in keeps no token in the browser
(the cookie is an opaque session), takes no form from another site's page, and a client guessing
tokens waits (429) with no TokenReview made for it. Screenshots under
$BENCHFARM_STATE/screenshots/web-<time>/ (the path is printed).

The history comes from tests/stack/webhistory.py (the runs' own metrics, a declared change point)
until the results database is merged; the lab's own `benchfarm web` process (BENCHFARM_WEB_URL)
is checked over HTTP.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def sign_in_form(url: str, token: str, nxt: str = "/lab", origin: str | None = "",
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, list[str]], str]:
    """`POST /signin` as the form sends it, from `origin` (default: the site's own; None: no
    Origin header): (status, the headers by lower-case name, the body or where it sends)."""
    headers = {**(headers or {}), **({} if origin is None else {"Origin": origin or url})}
    req = urllib.request.Request(url + "/signin", headers=headers,
                                 data=urllib.parse.urlencode({"token": token, "next": nxt}).encode())
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=30) as resp:
            got, status, body = resp.headers, resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        got, status = exc.headers, exc.code
        body = exc.headers.get("Location") or exc.read().decode(errors="replace")
    names: dict[str, list[str]] = {}
    for name, value in got.items():
        names.setdefault(name.lower(), []).append(value)
    return status, names, body


def session_cookie(headers: dict[str, list[str]]) -> str:
    """The session id the sign-in's Set-Cookie gives ("" if none)."""
    for value in headers.get("set-cookie", []):
        if value.startswith("benchfarm_session="):
            return value.split(";", 1)[0].split("=", 1)[1].strip('"')
    return ""


def token_reviews(kube) -> float:
    """TokenReviews the API server has answered so far (its own /metrics, the lab admin's
    account)."""
    resp = kube.call_api(*kube.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]),
                         _request_timeout=30)
    resp.read()
    text = resp.data.decode()
    return sum(float(m.group(1)) for m in re.finditer(
        r'^apiserver_request_total\{[^}]*resource="tokenreviews"[^}]*\} (\S+)$', text, re.M))


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


def test_the_browser_holds_a_session_not_the_token_and_a_page_elsewhere_signs_no_one_in(
        site, browser):
    """In Chromium: after sign-in the browser's cookies hold no token (the session cookie is
    HttpOnly and SameSite=Lax); a page of another origin that posts the sign-in form with
    another person's token is answered 403, and the person is still themselves."""
    from selenium.webdriver.common.by import By
    d = browser
    _sign_in(d, site)
    cookies = d.get_cookies()
    assert cookies and not [c for c in cookies if site["tokens"][NS_A] in str(c["value"])]
    session = next(c for c in cookies if c["name"] == "benchfarm_session")
    assert session["httpOnly"] and session["sameSite"] == "Lax"
    assert d.execute_script("return document.cookie") == ""     # no script reads it
    form = (f'<form id="f" method="post" action="{site["url"]}/signin">'
            f'<input name="token" value="{site["tokens"][NS_B]}"><input name="next" '
            f'value="/runs"></form><script>document.getElementById("f").submit()</script>')

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(form.encode())

        def log_message(self, *args):
            pass
    # a thread per connection: Chromium opens a spare connection it sends nothing on, and a
    # server of one thread waits on it for a minute before it reads the page's own request
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    evil.daemon_threads = True
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        d.get(f"http://localhost:{evil.server_address[1]}/")
        wait_for("the refusal", lambda: "this site's own page" in
                 d.find_element(By.TAG_NAME, "body").text, timeout=30)
    finally:
        evil.shutdown()
        evil.server_close()
    d.get(site["url"] + "/runs")
    assert d.find_element(By.ID, "who").text == f"system:serviceaccount:{NS_A}:viewer"
    d.find_element(By.CSS_SELECTOR, "form.who button, form.who input[type=submit]").click()
    wait_for("signed out", lambda: "/signin" in d.current_url, timeout=30)
    d.get(site["url"] + "/runs")
    assert urllib.parse.urlparse(d.current_url).path == "/signin"


def _text(driver, element_id: str) -> str:
    """An element's text read in one script: the page may replace the element between a
    find_element and its .text (seen in CI: "Node with given id does not belong to the document")."""
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.textContent : '';",
        element_id)


def _rows(driver, selector: str, attr: str = "data-run") -> list[str]:
    """An attribute of every element matching `selector`, read in one script, as `_text` does:
    the page may redraw its chart between a find_elements and a get_attribute (seen in CI: a
    stale element reference)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " e => arguments[1] === 'textContent' ? e.textContent : e.getAttribute(arguments[1]));",
        selector, attr)


def test_the_labs_web_process_takes_kubernetes_tokens_and_shows_one_namespace(site):
    url = devlab.lab_env()["BENCHFARM_WEB_URL"]
    assert _http(url + "/healthz") == (200, "ok")
    status, where = _http(url + "/runs")
    assert status == 302 and where.startswith("/signin")
    assert _http(url + "/runs", "not-a-token")[0] == 401
    status, page = _http(url + "/runs", site["tokens"][NS_A])
    assert status == 200 and site["runs"]["a1"] in page and site["runs"]["b1"] not in page
    assert _http(f"{url}/runs/{site['runs']['b1']}", site["tokens"][NS_A])[0] == 404


def test_the_labs_web_process_keeps_the_token_and_gives_the_browser_an_opaque_session(site):
    """The lab's own dashboard: sign-in's cookie is a session id (HttpOnly, SameSite=Lax, not
    Secure on plain HTTP on loopback), which opens the person's pages and is no token; sign-out
    ends it on the server, so the same id opens nothing afterwards."""
    url, token = devlab.lab_env()["BENCHFARM_WEB_URL"], site["tokens"][NS_A]
    status, headers, where = sign_in_form(url, token, "/runs")
    assert (status, where) == (303, "/runs")
    cookies = headers.get("set-cookie", [])
    assert cookies and not [c for c in cookies if token in c or token[-40:] in c], cookies
    sid = session_cookie(headers)
    assert len(sid) >= 43 and sid not in token
    flags = [f.strip().lower() for f in cookies[0].split(";")[1:]]
    assert "httponly" in flags and "samesite=lax" in flags and "secure" not in flags, flags

    def with_session(path: str) -> tuple[int, str]:
        req = urllib.request.Request(url + path, headers={"Cookie": f"benchfarm_session={sid}"})
        try:
            with urllib.request.build_opener(_NoRedirect).open(req, timeout=30) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Location") or ""
    status, page = with_session("/runs")
    assert status == 200 and site["runs"]["a1"] in page and site["runs"]["b1"] not in page
    assert _http(url + "/runs", sid)[0] == 401            # the session id is no bearer token
    req = urllib.request.Request(url + "/signout", data=b"", headers={
        "Origin": url, "Cookie": f"benchfarm_session={sid}"})
    with pytest.raises(urllib.error.HTTPError) as out:
        urllib.request.build_opener(_NoRedirect).open(req, timeout=30)
    assert out.value.code == 303
    status, where = with_session("/runs")
    assert status == 302 and where.startswith("/signin")


def test_a_sign_in_from_another_sites_page_is_refused(site, kube):
    """`POST /signin` with a good token from a page of another origin (or with neither Origin
    nor Referer): 403 saying why, no cookie, and no TokenReview made for it."""
    url, token = site["url"], site["tokens"][NS_B]
    before = token_reviews(kube)
    for origin in ("http://evil.example", "null", "http://127.0.0.1:1", None):
        status, headers, body = sign_in_form(url, token, origin=origin)
        assert status == 403 and "this site's own page" in body, (origin, status, body)
        assert "set-cookie" not in headers, origin
    assert token_reviews(kube) == before


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

    d.get(site["url"] + "/history?" + urllib.parse.urlencode(
        {"namespace": NS_A, "metric": METRIC, "deviceType": "qemu-x86", "plan": site["plan"]}))
    d.find_element(By.CSS_SELECTOR, "table.change-points a.bisect").click()  # the change point's
    wait_for("the bisection page", lambda: "/bisect?" in d.current_url, timeout=30)
    manifest = yaml.safe_load(d.find_element(By.ID, "bisect-manifest").text)
    assert manifest["kind"] == "BenchmarkBisection" and manifest["metadata"] == {
        "name": "bisect-" + runs["a3"].split("/")[1], "namespace": NS_A}
    # b1 (a2's) to b2 (a3's, the point); the runs' own latencies say which way it went: to find
    # a lower one (an improvement), "worse" is turned round
    status, body = _http(site["url"] + "/history?" + urllib.parse.urlencode(
        {"namespace": NS_A, "metric": METRIC, "deviceType": "qemu-x86", "plan": site["plan"],
         "format": "json"}), site["tokens"][NS_A])
    assert status == 200, body
    [change] = json.loads(body)["changePoints"]
    improvement = change["direction"] == "improvement"
    assert manifest["spec"] == {"metric": METRIC, "plan": site["plan"],
                                "selector": {"deviceType": "qemu-x86"},
                                **({"higherIsBetter": True} if improvement else {}),
                                "good": {"name": "b1"}, "builds": [{"name": "b2"}]}
    todo = d.find_element(By.ID, "bisect-todo").text
    assert "board's own image" in todo and ("this change is an improvement" in todo) == improvement
    assert f"benchfarm bisect log {NS_A}/bisect-" in d.find_element(By.ID, "bisect-command").text
    _shot(d, site, "5-bisect")


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


def test_the_run_page_and_its_report_say_what_each_iteration_was_measured_under(site, browser):
    """qemu-x86 boards record conditions (a simulated stand-in) and their rails: the run page
    lists every iteration with its frequency, governor, temperature and energy, says
    "simulated", and the report's fused timeline draws power, frequency and temperature after
    the boots on the host clock."""
    from selenium.webdriver.common.by import By
    d = browser
    _sign_in(d, site)
    d.get(f"{site['url']}/runs/{site['runs']['a1']}")
    assert d.find_element(By.ID, "measured-under").text == "Measured under"
    rows = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
            for r in d.find_elements(By.CSS_SELECTOR, "table.measured tr.attempt")]
    assert [r[0] for r in rows if r[1] == "1"] == ["1", "2", "3"]       # every iteration
    for _, _, valid, mhz, governor, temp, busy, _, joules, watts in rows:
        assert valid in ("yes", "no") and governor == "performance", rows
        assert float(mhz.split("–")[0]) > 0 and float(temp) > 0
        assert busy.endswith(" %") or busy == "n/a"      # the first step after a boot: none
        # the lab's monitor sampled every attempt's rails, the shortest too (a 0.2 s step)
        assert float(joules) > 0 and float(watts) > 0, rows
    assert "simulated" in d.find_element(By.CSS_SELECTOR, "p.simulated").text
    assert "valid iterations:" in d.find_element(By.CSS_SELECTOR, "p.conditions-summary").text
    _shot(d, site, "6-measured-under")
    d.get(f"{site['url']}/runs/{site['runs']['a1']}/artifacts/report.html")
    got = d.execute_script("""
        const svg = document.querySelector('svg[aria-label="conditions timeline"]');
        const lane = svg.querySelector('#timeline-steps');
        const spans = [...lane.querySelectorAll('path')].map(p => ({
            title: p.querySelector('title').textContent, left: p.getBoundingClientRect().left}));
        const lines = {};
        for (const key of ['power', 'frequency', 'temperature']) {
          const line = svg.querySelector(`#timeline-${key} path[style*="fill: none"]`);
          lines[key] = line ? line.getBoundingClientRect().width : 0;
        }
        return {spans, lines};""")
    boots = [s["left"] for s in got["spans"] if s["title"].startswith("boot")]
    steps = [s["left"] for s in got["spans"] if s["title"].startswith("cyclictest #")]
    assert len(boots) == 1 and len(steps) >= 3 and max(boots) < min(steps)
    assert all(width > 0 for width in got["lines"].values()), got["lines"]
    _shot(d, site, "7-report-timeline")


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
    bisect = site["url"] + "/bisect?" + urllib.parse.urlencode(   # team A's change point
        {"namespace": NS_A, "metric": METRIC, "deviceType": "qemu-x86", "plan": site["plan"],
         "run": site["runs"]["a3"]})
    assert _http(bisect, site["tokens"][NS_A])[0] == 200 and _http(
        bisect, site["tokens"][NS_B])[0] == 404
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


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_limit(lab, kube):
    """A dashboard told that loopback is its proxy (BENCHFARM_WEB_TRUSTED_PROXIES): guesses
    forwarded for one client reach 429 for that client, also when it writes another address
    before its own in X-Forwarded-For; a person forwarded by the same proxy still signs in."""
    from kubernetes import client

    from benchfarm.web.sessions import BURST
    token = _person(client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), NS_A)
    port = _free_port()
    env = {**os.environ, **devlab.lab_env(), "BENCHFARM_WEB_TRUSTED_PROXIES": "127.0.0.0/8",
           "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    log = devlab.STATE / "logs" / f"web-proxied-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        web = subprocess.Popen([sys.executable, "-m", "benchfarm.cli", "web", "--port", str(port)],
                               env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("benchfarm web", lambda: _http(url + "/healthz")[0] == 200, timeout=60)
        guesser = {"X-Forwarded-For": "198.51.100.7"}
        answers = [sign_in_form(url, f"guess-{i}-{time.time_ns()}", headers=guesser)[0]
                   for i in range(BURST + 1)]
        assert answers == [401] * BURST + [429], answers
        spoofed = {"X-Forwarded-For": "203.0.113.5, 198.51.100.7"}     # the proxy's is last
        assert sign_in_form(url, "guess-spoofed", headers=spoofed)[0] == 429
        status, headers, where = sign_in_form(url, token, "/runs",
                                              headers={"X-Forwarded-For": "198.51.100.8"})
        assert (status, where) == (303, "/runs") and session_cookie(headers)
    finally:
        web.terminate()
        web.wait(10)


def test_guessing_tokens_is_slowed_to_a_429_with_no_token_review(site, kube):
    """Failed sign-ins from one address: the first ones are reviewed (401), then 429 with a
    Retry-After, for a bad token and a good one alike, and the API server is asked nothing.
    Last in this module: the site's process holds this address back for a minute after."""
    from kubernetes import client

    from benchfarm.web.sessions import BURST, REFILL_SECONDS
    url = site["url"]
    answers: list[int] = []
    first = token_reviews(kube)
    while 429 not in answers and len(answers) <= BURST:
        answers.append(sign_in_form(url, f"guess-{len(answers)}-{time.time_ns()}")[0])
    assert answers[-1] == 429 and set(answers[:-1]) == {401}, answers
    assert token_reviews(kube) >= first + len(answers) - 1       # each 401 was a TokenReview
    fresh = _person(client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), NS_B)
    before = token_reviews(kube)
    for token in ("guess-more", fresh):             # a good token never reviewed: none now
        status, headers, body = sign_in_form(url, token)
        assert status == 429 and "try again in" in body, (status, body)
        assert 0 < int(headers["retry-after"][0]) <= REFILL_SECONDS + 1
        assert "set-cookie" not in headers
    status = _http(url + "/runs", "guess-by-header")[0]
    assert status == 429
    assert token_reviews(kube) == before
