"""The dashboard's HTTP server (aiohttp): pages rendered here, artifacts passed through from the
store, every request signed in (access) and every run checked against the person's namespaces.

A person signs in once (the form's token is reviewed, `access`) and the browser then holds only an
opaque session id (`sessions`): the token stays in this process's memory, the cookie is HttpOnly,
SameSite=Lax and `Secure` unless the site is plain HTTP on loopback, and sign-in and sign-out take
a form from this site's own page only. A client whose tokens keep being refused waits (429) and
costs the API server no TokenReview meanwhile.

The Kubernetes client and the store client block: their calls run on threads, never on the
server's event loop. A page drawn from a tenant's figures (a run, a history, a comparison) is
rendered in a budgeted child (`rendering`, BENCHFARM_WEB_RENDER_CPU_SECONDS): past its budget
that page answers 503 saying so, and every other page answers meanwhile. A run of a namespace
the person may not read is answered like a run that does not exist (404), on every path that
names it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import math
import mimetypes
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from aiohttp import web
from kubernetes.client.rest import ApiException

from benchfarm import budgeted
from benchfarm.api.base import FAIRNESS_CONFIG_MAP, FAIRNESS_KEY
from benchfarm.core.policy.software import Network
from benchfarm.core.statistics.regression import higher_is_better_for, unit_of
from benchfarm.errors import BenchfarmError
from benchfarm.kubeapi.client import Kube
from benchfarm.logs import configure
from benchfarm.settings import SettingError, Settings
from benchfarm.store.artifacts import MAX_DOCUMENT_BYTES, ArtifactStore, StoreConfig, run_prefix
from benchfarm.web import rendering, views
from benchfarm.web.access import Access, Person
from benchfarm.web.history import HistorySource, load_source, visible
from benchfarm.web.sessions import (
    CookieSecure,
    FailedSignIns,
    Sessions,
    client_of,
    cookie_secure,
    cross_origin,
    proxies,
)

log = logging.getLogger(__name__)
COOKIE = "benchfarm_session"      # an opaque session id (sessions.Sessions), never the token
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RENDER_BUDGET = budgeted.Budget(10.0, 1024)    # `serve` takes the settings'
RENDERS = 4     # pages rendered from tenant figures at once (each a child); more wait their turn
HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                      "style-src 'self' 'unsafe-inline'; frame-src 'self'",
           "Cache-Control": "no-store"}


class Dashboard:
    def __init__(self, kube: Kube, store: ArtifactStore, history: HistorySource,
                 access: Access, namespace: str, *, cookie_secure: CookieSecure = "auto",
                 site_url: str = "", trusted_proxies: Sequence[Network] = (),
                 render_budget: budgeted.Budget = RENDER_BUDGET) -> None:
        self.kube, self.store, self.history, self.access = kube, store, history, access
        self.namespace = namespace          # the operator's (its fairness ConfigMap)
        self.cookie_secure = cookie_secure  # BENCHFARM_WEB_COOKIE_SECURE
        self.site_url = site_url            # BENCHFARM_WEB_URL: an origin sign-in also takes
        self.trusted_proxies = tuple(trusted_proxies)   # BENCHFARM_WEB_TRUSTED_PROXIES
        self.sessions = Sessions()
        self.failures = FailedSignIns()
        self.render_budget = render_budget  # BENCHFARM_WEB_RENDER_CPU_SECONDS, _MEMORY_MIB
        # the threads that wait for the renders' children (the API's and the store's calls
        # have the loop's own): a page over its budget keeps one of these, never those
        self.renders = concurrent.futures.ThreadPoolExecutor(RENDERS, "render")

    # -- sign-in --------------------------------------------------------------------------------
    @web.middleware
    async def outages(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The API server or the store out of reach: a page that says so (503), not a crash."""
        try:
            return await handler(request)
        except (BenchfarmError, ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            if isinstance(exc, ApiException) and exc.status and exc.status < 500:
                raise
            log.warning("%s: %s", request.path, exc)     # the detail is the lab's, not the page's
            return web.Response(status=503, text="benchfarm web: a service the dashboard reads "
                                "(the Kubernetes API or the artifact store) is unavailable; try "
                                "again in a moment")

    @web.middleware
    async def signed_in(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A bearer token (the CLI, scripts) or a session's cookie (a browser), else sign-in."""
        if request.path in ("/signin", "/signout", "/healthz") or \
                request.path.startswith("/static/"):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        if header:
            token = header[7:].strip() if header.lower().startswith("bearer ") else ""
            wait, person = await self._review(request, token)
            if wait:
                raise web.HTTPTooManyRequests(headers={"Retry-After": str(wait)},
                                              text=_too_many(wait))
            if person is None:
                raise web.HTTPUnauthorized(text="the token was not accepted")
        else:
            person = await self._session_person(request)
            if person is None:
                raise web.HTTPFound("/signin?" + urlencode({"next": request.path_qs}))
        request["person"] = person
        return await handler(request)

    async def _session_person(self, request: web.Request) -> Person | None:
        """The person of the request's session: its token reviewed again once its answer is
        older than `access.TTL`; a session whose token is no longer accepted is closed."""
        sid = request.cookies.get(COOKIE, "")
        session = self.sessions.get(sid, time.monotonic())
        if session is None:
            return None
        person = await asyncio.to_thread(self.access.person, session.token)
        if person is None:
            self.sessions.close(sid)
        return person

    async def _review(self, request: web.Request, token: str) -> tuple[int, Person | None]:
        """(seconds to wait, 0 if none; the token's person or None). A token whose answer is
        kept costs no review; a client out of attempts gets none, a refused token takes one."""
        client = client_of(request.remote, ",".join(request.headers.getall("X-Forwarded-For", [])),
                           self.trusted_proxies)
        now = time.monotonic()
        known, person = self.access.cached(token) if token else (True, None)
        if not known:
            wait = self.failures.wait(client, now)
            if wait:
                return math.ceil(wait), None
            person = await asyncio.to_thread(self.access.person, token)
        if person is None:
            self.failures.failed(client, now)
        return 0, person

    def _refused_origin(self, request: web.Request) -> None:
        """403 for a form posted from a page elsewhere (sign-in, sign-out)."""
        why = cross_origin(request.headers.get("Origin"), request.headers.get("Referer"),
                           request.host, request.secure, self.site_url)
        if why:
            log.info("%s from %s refused: %s", request.path, request.remote, why)
            raise web.HTTPForbidden(text=f"benchfarm web: {why}")

    def _secure(self, request: web.Request) -> bool:
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        local = sock[0] if isinstance(sock, tuple) and sock else None
        return cookie_secure(self.cookie_secure, request.secure, request.host, local)

    async def signin_form(self, request: web.Request) -> web.StreamResponse:
        return self.page("signin.html.j2", None, next=views.local_path(request.query.get("next")),
                         error="")

    async def signin(self, request: web.Request) -> web.StreamResponse:
        self._refused_origin(request)
        form = await request.post()
        token, nxt = str(form.get("token", "")).strip(), views.local_path(form.get("next"))
        wait, person = await self._review(request, token)
        if wait:
            resp = self.page("signin.html.j2", None, next=nxt, status=429, error=_too_many(wait))
            resp.headers["Retry-After"] = str(wait)
            return resp
        if person is None:
            return self.page("signin.html.j2", None, next=nxt, status=401,
                             error="Kubernetes did not accept that token.")
        self.sessions.close(request.cookies.get(COOKIE, ""))    # a new session, never the old id
        sid = self.sessions.open(token, person.name, time.monotonic())
        resp = web.HTTPSeeOther(nxt)
        resp.set_cookie(COOKIE, sid, httponly=True, samesite="Lax", path="/",
                        secure=self._secure(request), max_age=int(self.sessions.lifetime))
        raise resp

    async def signout(self, request: web.Request) -> web.StreamResponse:
        self._refused_origin(request)
        self.sessions.close(request.cookies.get(COOKIE, ""))
        resp = web.HTTPSeeOther("/signin")
        resp.del_cookie(COOKIE, path="/")
        raise resp

    # -- pages ----------------------------------------------------------------------------------
    def page(self, template: str, person: Person | None, status: int = 200,
             **context: Any) -> web.Response:
        """A page of the lab's own text (no tenant's figures), rendered here."""
        html = rendering.render(template, {"person": person, **context})
        return web.Response(text=html, content_type="text/html", status=status, headers=HEADERS)

    async def budgeted_page(self, request: web.Request, fn: Callable[..., str],
                            *args: Any) -> web.Response:
        """`fn(*args)` (a `rendering` function) in a child within the render budget; past it,
        a 503 that says so."""
        call = functools.partial(budgeted.call, fn, *args, budget=self.render_budget,
                                 preload=rendering.PRELOAD, name=f"render-{fn.__name__}")
        try:
            html = await asyncio.get_running_loop().run_in_executor(self.renders, call)
        except budgeted.OverBudget as exc:
            log.warning("%s: rendering %s: %s", request.path_qs, fn.__name__, exc.what)
            return web.Response(status=503, headers=HEADERS, text=(
                f"benchfarm web: rendering this page from its runs' figures {exc.what} "
                f"(BENCHFARM_WEB_RENDER_CPU_SECONDS, BENCHFARM_WEB_RENDER_MEMORY_MIB); the "
                f"dashboard's other pages answer as usual"))
        return web.Response(text=html, content_type="text/html", headers=HEADERS)

    async def lab(self, request: web.Request) -> web.StreamResponse:
        person: Person = request["person"]
        runs, boards, served, leases = await asyncio.gather(
            asyncio.to_thread(self.kube.list_runs),
            asyncio.to_thread(self.kube.list_cluster, "boards"),
            asyncio.to_thread(self._last_served),
            asyncio.to_thread(self.kube.list_custom_all, "boardleases"))
        rows = views.queue_rows(runs, boards, time.time(), served, leases)
        queues: dict[str, list[views.QueueRow]] = {}
        for row in rows:
            if person.may_read(row.namespace):
                queues.setdefault(row.namespace, []).append(row)
        return self.page("lab.html.j2", person, boards=views.board_rows(boards, person.may_read),
                         queues=dict(sorted(queues.items())), waiting=len(rows))

    def _last_served(self) -> dict[str, float]:
        try:
            data = self.kube.get_config_map(self.namespace, FAIRNESS_CONFIG_MAP) or {}
            return {str(k): float(v) for k, v in json.loads(data.get(FAIRNESS_KEY, "{}")).items()}
        except (ApiException, ValueError, BenchfarmError):
            return {}       # not readable here: namespaces take turns from the start

    async def runs(self, request: web.Request) -> web.StreamResponse:
        person: Person = request["person"]
        runs = await asyncio.to_thread(self.kube.list_runs)
        rows = [views.run_row(r) for r in runs if person.may_read(r["metadata"]["namespace"])]
        filters = {f: request.query.get(f, "") for f in views.FILTERS}
        choices = {f: sorted({str(r[f]) for r in rows if r[f]}) for f in views.FILTERS if f != "q"}
        return self.page("runs.html.j2", person, rows=views.filter_runs(rows, filters),
                         filters=filters, choices=choices, total=len(rows))

    async def _run(self, request: web.Request) -> tuple[Person, dict[str, Any]]:
        person: Person = request["person"]
        ns, name = request.match_info["ns"], request.match_info["name"]
        run = await asyncio.to_thread(self.kube.get_run, ns, name) if person.may_read(ns) else None
        if run is None:
            raise web.HTTPNotFound(text=f"no run {ns}/{name} that you may see")
        return person, run

    def _prefix(self, run: dict[str, Any]) -> str:
        meta = run["metadata"]
        return run_prefix(meta["namespace"], meta["name"], meta["uid"],
                          (run.get("spec") or {}).get("artifactPrefix", ""))

    async def run(self, request: web.Request) -> web.StreamResponse:
        person, run = await self._run(request)
        meta = run["metadata"]
        prefix = self._prefix(run)
        events, keys = await asyncio.gather(
            asyncio.to_thread(self._events, meta["namespace"], meta["name"], meta["uid"]),
            asyncio.to_thread(self._artifacts, prefix))
        base = f"/runs/{quote(meta['namespace'])}/{quote(meta['name'])}"
        artifacts = [(k[len(prefix) + 1:], f"{base}/artifacts/{quote(k[len(prefix) + 1:])}")
                     for k in keys]
        metrics = f"{prefix}/metrics.json"
        raw = await asyncio.to_thread(self._metrics, metrics) if metrics in keys else None
        return await self.budgeted_page(request, rendering.run_page, {
            "person": person, "run": run, "row": views.run_row(run),
            "st": run.get("status") or {}, "events": events, "artifacts": artifacts,
            "report": f"{base}/artifacts/report.html" if f"{prefix}/report.html" in keys
            else None, "spec_yaml": json.dumps(run.get("spec") or {}, indent=2)}, raw)

    def _metrics(self, key: str) -> bytes | None:
        """A run's metrics.json as stored, for its page's conditions (parsed in the render's
        child); None past the size of a document the lab reads, or when the store says no."""
        try:
            if self.store.size(key) > MAX_DOCUMENT_BYTES:
                return None
            return self.store.get(key)
        except BenchfarmError as exc:
            log.warning("%s not read: %s", key, exc)
            return None

    def _events(self, namespace: str, name: str, uid: str) -> list[dict[str, Any]]:
        found = self.kube.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}")
        events = [self.kube.api.sanitize_for_serialization(e) for e in found.items]
        events = [e for e in events if (e.get("involvedObject") or {}).get("uid") in (None, uid)]
        return sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def _artifacts(self, prefix: str) -> list[str]:
        try:
            return sorted(self.store.list(prefix + "/"))
        except BenchfarmError as exc:
            log.warning("artifacts of %s not listed: %s", prefix, exc)
            return []

    async def artifact(self, request: web.Request) -> web.StreamResponse:
        _, run = await self._run(request)
        path = request.match_info["path"]
        if any(s in ("", ".", "..") for s in path.split("/")):
            raise web.HTTPNotFound()
        key = f"{self._prefix(run)}/{path}"
        try:
            stream = await asyncio.to_thread(self.store.open, key)
        except BenchfarmError as exc:
            log.info("%s: %s", key, exc)
            raise web.HTTPNotFound(text=f"{path}: no such artifact") from exc
        ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
        if path.endswith((".log", ".md", ".rst", ".txt", ".out")):
            ctype = "text/plain"
        resp = web.StreamResponse(headers={
            "Content-Type": ctype + ("; charset=utf-8" if ctype.startswith("text/") else ""),
            # a report is the run's own document: shown, never given this site's cookies or scripts
            "Content-Security-Policy": "sandbox; default-src 'none'; img-src data:; "
                                       "style-src 'unsafe-inline'",
            "X-Content-Type-Options": "nosniff"})
        await resp.prepare(request)
        try:
            while chunk := await asyncio.to_thread(stream.read, 256 * 1024):
                await resp.write(chunk)
        finally:
            stream.close()
        await resp.write_eof()
        return resp

    async def history_page(self, request: web.Request) -> web.StreamResponse:
        """One namespace's series: its chart, change points and menus (`?format=json`: the same
        as JSON). A person's menus hold only the series of namespaces they may read (a lab admin:
        every namespace), and the metric, device type and plan menus only the chosen
        namespace's."""
        person: Person = request["person"]
        keys = await asyncio.to_thread(self.history.series_keys, _scope(person))
        menus = views.history_menus(keys, person.may_read, request.query)
        want = menus.want
        doc: dict[str, Any] = {"series": [], "changePoints": []}
        if menus.known:
            doc = visible(await asyncio.to_thread(self.history.history, *want), person.may_read)
        unit = unit_of(want.metric)
        if request.query.get("format") == "json":
            return web.json_response({
                "namespace": want.namespace, "namespaces": menus.namespaces,
                "menus": {"metric": menus.choices["metric"],
                          "deviceType": menus.choices["device_type"],
                          "plan": menus.choices["plan"]},
                "metric": want.metric, "deviceType": want.device_type, "plan": want.plan,
                "known": menus.known, "series": doc["series"],
                "changePoints": doc["changePoints"]}, headers={"Cache-Control": "no-store"})
        return await self.budgeted_page(request, rendering.history_page, {
            "person": person, "keys": keys, "want": want, "choices": menus.choices,
            "namespaces": menus.namespaces, "known": menus.known}, doc, unit)

    async def bisect(self, request: web.Request) -> web.StreamResponse:
        """A change point's bisection to create (`?namespace, metric, deviceType, plan` name the
        series, `run` its change point): the runs on either side of it are read as the person
        may read them, the manifest drawn in the budgeted child."""
        person: Person = request["person"]
        key = views.SeriesKey(*(request.query.get(f, "") for f in (
            "namespace", "metric", "deviceType", "plan")))
        doc: dict[str, Any] = {"series": [], "changePoints": []}
        if person.may_read(key.namespace):
            doc = visible(await asyncio.to_thread(self.history.history, *key), person.may_read)
        change = next((c for c in doc["changePoints"] if c["run"] == request.query.get("run")),
                      None)
        if change is None:
            raise web.HTTPNotFound(text="no such change point that you may see")
        before, after = views.bisection_ends(change, doc["series"])
        runs = {}
        for point in (before, after):
            ns, _, name = str((point or {}).get("run", "")).partition("/")
            if ns == key.namespace and (found := await asyncio.to_thread(self.kube.get_run, ns, name)):
                runs[f"{ns}/{name}"] = found
        # the store's source says nothing of which way is better: then the unit's
        higher = doc.get("higherIsBetter", higher_is_better_for(unit_of(key.metric)))
        return await self.budgeted_page(request, rendering.bisect_page, {"person": person},
                                        key, change, before, after, runs, bool(higher))

    async def compare(self, request: web.Request) -> web.StreamResponse:
        """Every metric of one namespace's device type and plan: the runs of build A against
        those of B."""
        person: Person = request["person"]
        ns = request.query.get("namespace", "")
        dtype, plan = request.query.get("deviceType", ""), request.query.get("plan", "")
        a, b = request.query.get("a", ""), request.query.get("b", "")
        keys = [] if not person.may_read(ns) else [
            k for k in await asyncio.to_thread(self.history.series_keys, frozenset({ns}))
            if k.namespace == ns and k.device_type == dtype and k.plan == plan]
        docs = [(k.metric, visible(await asyncio.to_thread(self.history.history, *k, False),
                                   person.may_read)) for k in keys]
        return await self.budgeted_page(request, rendering.compare_page, {
            "person": person, "deviceType": dtype, "plan": plan, "namespace": ns}, docs, a, b)

    async def index(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/lab")

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.outages, self.signed_in])
        static = os.path.join(os.path.dirname(__file__), "static")
        app.add_routes([
            web.get("/", self.index), web.get("/healthz", self.healthz),
            web.get("/signin", self.signin_form), web.post("/signin", self.signin),
            web.post("/signout", self.signout), web.get("/lab", self.lab),
            web.get("/runs", self.runs), web.get("/runs/{ns}/{name}", self.run),
            web.get("/runs/{ns}/{name}/artifacts/{path:.+}", self.artifact),
            web.get("/history", self.history_page), web.get("/compare", self.compare),
            web.get("/bisect", self.bisect),
            web.static("/static", static)])
        return app


def _too_many(wait: int) -> str:
    return (f"Too many refused tokens from your address: try again in {wait} s (no token is "
            "checked meanwhile).")


def _scope(person: Person) -> frozenset[str] | None:
    """The namespaces whose series a person is offered: theirs, or every one (None) for a
    cluster-wide grant (a lab admin)."""
    return None if person.everywhere else person.namespaces


def serve(address: str, port: int, history_source: str | None = None) -> int:
    configure(logging.INFO)
    settings = Settings.from_env()
    try:
        trusted = proxies(settings.web_trusted_proxies)
    except ValueError as exc:
        raise SettingError(f"BENCHFARM_WEB_TRUSTED_PROXIES={settings.web_trusted_proxies!r}: "
                           f"{exc}") from None
    kube = Kube(settings, outage_budget=10)
    store = ArtifactStore(StoreConfig.from_settings(settings), attempts=2)
    source = load_source(history_source or settings.web_history_source or None, kube, store,
                         database_url=settings.database_url)
    dashboard = Dashboard(kube, store, source, Access(kube.api), settings.namespace,
                          cookie_secure=settings.web_cookie_secure, site_url=settings.web_url,
                          trusted_proxies=trusted, render_budget=budgeted.Budget(
                              settings.web_render_cpu_seconds, settings.web_render_memory_mib,
                              wall_seconds=settings.web_render_cpu_seconds * 3 + 10))
    budgeted.start(rendering.PRELOAD)      # the renders' forkserver, before the first page
    web.run_app(dashboard.app(), host=address, port=port, print=None, access_log=None)
    return 0
