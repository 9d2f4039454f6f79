"""Notifications on the real stack (issue 43, part 2): the lab's operator delivers to real
receivers on loopback (an HTTP server per team, `tests/receivers.py`) and to a real SMTP server
(aiosmtpd, STARTTLS only, its certificate issued here by a CA of the test's making, which the
operator verifies: BENCHFARM_SMTP_CA_FILE of the embedded lab).

Team A subscribes to its runs' end and regression (webhook and e-mail), to its leases, and once
more with a receiver that is down; team B subscribes to everything a tenant may, with a receiver
of its own, and never gets anything of team A's. Then (issue 53) what bounds them: a receiver
that trickles its answer holds one delivery of its namespace until the attempt's deadline and
delays no other namespace's; a namespace's Notifications, recipients and deliveries an hour are
capped by its LabPolicy. Two small runs of an inline plan on qemu-x86 (a
baseline at 1.000 and a run at 2.000 judged against it: regressed), one lease granted, warned
and released. Team A also submits its finished runs to a KCIDB endpoint (a receiver with a
bearer token): each document validates with kcidb-io.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac
import itertools
import json
import time
import uuid
from email.message import EmailMessage

import kcidb_io
import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.settings import Settings
from benchfarm_devlab.lab import LAB_POLICY, apply_lab_policy
from tests.receivers import SmtpServer, TricklingReceiver, WebhookReceiver, tls_files
from tests.stack.conftest import apply, wait_for
from tests.stack.runs import GROUP, VERSION, cond, finished, run_yaml

pytestmark = pytest.mark.stack
KEYS = {"a": b"team-a-signing-key", "b": b"team-b-signing-key"}
KCIDB_TOKEN = "team-a-kcidb-token"
TENANT_EVENTS = ["RunFinished", "Regression", "ChangePoint", "CampaignFinished", "LeaseGranted",
                 "LeaseEnding", "LeaseEnded"]


def _run(name: str, ns: str, figure: str, **spec) -> str:
    return yaml.safe_dump({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"deviceType": "qemu-x86"}, "iterations": 5, "bootCycles": 1,
                 "timeoutSeconds": 300,
                 "suites": [{"name": "hb", "suite": "hackbench", "timeoutSeconds": 30,
                             "command": f"echo 'Time: {figure}'"}], **spec}})


def _notification(name: str, ns: str, events: list[str], port: int | None = None,
                  email: list[str] | None = None, **spec) -> str:
    body = {"events": events, **spec}
    if port is not None:
        body["webhook"] = {"url": f"http://127.0.0.1:{port}/hook", "signingKey": "hook"}
    if email:
        body["email"] = {"to": email}
    return yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Notification",
                           "metadata": {"name": name, "namespace": ns}, "spec": body})


def _secret(ns: str, key: bytes, **more: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": "benchfarm-notifications", "namespace": ns},
                           "stringData": {"hook": key.decode(), **more}})


def _mail(message: dict) -> EmailMessage:
    return email.message_from_bytes(message["content"], policy=email.policy.default)


def _status(custom, name, ns):
    return custom.get_namespaced_custom_object(GROUP, VERSION, ns, "notifications",
                                               name).get("status") or {}


def _verified(received: list[dict], key: bytes) -> list[dict]:
    """Every POST's body, after checking its signature as a receiver would (hmac, by hand)."""
    out = []
    for r in received:
        h = {k.lower(): v for k, v in r["headers"].items()}
        stamp = h["x-benchfarm-timestamp"]
        mac = hmac.new(key, stamp.encode() + b"." + r["body"], hashlib.sha256).hexdigest()
        assert hmac.compare_digest(h["x-benchfarm-signature"], f"sha256={mac}"), h
        assert abs(time.time() - int(stamp)) < 600
        body = json.loads(r["body"])
        assert h["x-benchfarm-delivery"] == body["id"] and h["x-benchfarm-event"] == body["kind"]
        out.append(body)
    return out


@pytest.fixture(scope="module")
def custom(kube):
    from kubernetes import client
    return client.CustomObjectsApi(kube)


@pytest.fixture(scope="module")
def teams(kube, operator, custom):
    from kubernetes import client
    tag = uuid.uuid4().hex[:5]
    a, b = f"notify-a-{tag}", f"notify-b-{tag}"
    first = devlab.PORTS.notify_receivers
    ports = {"a": first, "b": first + 1, "late": first + 2, "kcidb": first + 3}
    for ns in (a, b):
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": ns}})
    policy = json.loads(json.dumps(LAB_POLICY))
    policy["spec"]["leaseWarningSeconds"] = 3600       # a granted lease is warned at once
    policy["spec"]["namespaces"] += [
        {"namespace": a, "allowInlineSuites": True,
         "webhookHosts": [f"127.0.0.1:{ports[p]}" for p in ("a", "late", "kcidb")],
         "emailDomains": ["team-a.example"],
         "leases": {"allowed": True, "maxLeaseSeconds": 600}},
        {"namespace": b, "allowInlineSuites": True, "webhookHosts": [f"127.0.0.1:{ports['b']}"],
         "emailDomains": ["team-b.example"]}]
    apply(yaml.safe_dump(policy))
    cert, key, _ = tls_files(devlab.STATE / "notify", ca_file=devlab.SMTP_CA_FILE)
    smtp = SmtpServer(devlab.PORTS.smtp, cert, key).start()
    receivers = {"a": WebhookReceiver(ports["a"]).start(), "b": WebhookReceiver(ports["b"]).start(),
                 "late": WebhookReceiver(ports["late"]),          # down until test 3 starts it
                 "kcidb": WebhookReceiver(ports["kcidb"]).start()}
    apply(_secret(a, KEYS["a"], kcidb=KCIDB_TOKEN) + "---\n" + _secret(b, KEYS["b"]))
    apply("---\n".join([
        _notification("ci", a, ["RunFinished", "Regression"], ports["a"],
                      email=["kernel-ci@team-a.example"]),
        _notification("late", a, ["RunFinished"], ports["late"], outcomes=["Succeeded"]),
        _notification("kcidb", a, ["RunFinished"], kcidb={
            "url": f"http://127.0.0.1:{ports['kcidb']}/submit", "tokenKey": "kcidb"}),
        _notification("leases", a, ["LeaseGranted", "LeaseEnding", "LeaseEnded"], ports["a"],
                      email=["desk@team-a.example"]),
        _notification("all", b, TENANT_EVENTS, ports["b"], email=["ops@team-b.example"]),
        # team A's receiver, which team B's policy does not list; a lab admin's event
        _notification("elsewhere", b, ["RunFinished"], ports["a"]),
        _notification("boards", b, ["BoardQuarantined"], ports["b"])]))
    for ns, name in ((a, "ci"), (a, "late"), (a, "kcidb"), (a, "leases"), (b, "all")):
        wait_for(f"{ns}/{name} Ready", lambda ns=ns, name=name: cond(
            _status(custom, name, ns), "Ready").get("status") == "True", timeout=60)
    yield {"a": a, "b": b, "receivers": receivers, "smtp": smtp, "ports": ports}
    for r in receivers.values():
        r.stop()
    smtp.stop()
    apply_lab_policy()
    for ns in (a, b):
        client.CoreV1Api(kube).delete_namespace(ns)


def test_a_notification_the_lab_does_not_allow_says_why(custom, teams):
    b = teams["b"]
    st = wait_for("b/elsewhere judged", lambda: cond(_status(custom, "elsewhere", b), "Ready")
                  or None, timeout=60)
    assert st["status"] == "False" and st["reason"] == "WebhookForbidden", st
    assert "not on the namespace's webhookHosts" in st["message"]
    st = wait_for("b/boards judged", lambda: cond(_status(custom, "boards", b), "Ready") or None,
                  timeout=60)
    assert st["status"] == "False" and st["reason"] == "LabAdminOnly", st
    # the CRD's own rules: a JSON webhook is signed
    with pytest.raises(RuntimeError, match="signingKey"):
        apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Notification",
                              "metadata": {"name": "unsigned", "namespace": b},
                              "spec": {"events": ["RunFinished"], "webhook": {
                                  "url": "https://hooks.example.com/x"}}}))
    # ... and KCIDB takes finished runs
    with pytest.raises(RuntimeError, match="kcidb submits finished runs"):
        apply(_notification("kcidb-nothing", b, ["Regression"], kcidb={
            "url": "https://kcidb.example.org/submit"}))


def test_team_as_runs_reach_its_receivers_signed_and_team_b_hears_nothing(custom, teams):
    a, rx, smtp = teams["a"], teams["receivers"], teams["smtp"]
    apply(_run("base", a, "1.000"))
    assert finished(custom, "base", a, timeout=300)["phase"] == "Succeeded"
    apply(_run("slower", a, "2.000", baseline="base"))
    st = finished(custom, "slower", a, timeout=300)
    assert st["phase"] == "Succeeded" and cond(st, "Regressed")["status"] == "True", st

    got = wait_for("team A's three events", lambda: len(rx["a"].received) >= 3 and
                   rx["a"].received, timeout=60)
    bodies = _verified(got, KEYS["a"])
    assert sorted((b["kind"], b["object"]["name"]) for b in bodies) == [
        ("Regression", "slower"), ("RunFinished", "base"), ("RunFinished", "slower")]
    assert {b["namespace"] for b in bodies} == {a}
    assert {b["notification"] for b in bodies} == {f"{a}/ci"}
    regression = next(b for b in bodies if b["kind"] == "Regression")
    assert "hb/" in regression["details"]["regression"], regression
    mails = smtp.wait(3)
    assert len(mails) == 3 and all(m["tls"] and m["to"] == ["kernel-ci@team-a.example"]
                                   for m in mails), mails
    subjects = sorted(_mail(m)["Subject"] for m in mails)
    assert any("regressed against base" in s for s in subjects), subjects

    st = wait_for("a/ci's status", lambda: (s := _status(custom, "ci", a)).get("delivered") == 6
                  and s, timeout=30)
    assert cond(st, "Delivered")["status"] == "True" and st["pending"] == 0, st
    assert {(d["event"], d["target"], d["state"]) for d in st["deliveries"]} == {
        ("RunFinished", "webhook", "Delivered"), ("RunFinished", "email", "Delivered"),
        ("Regression", "webhook", "Delivered"), ("Regression", "email", "Delivered")}
    assert {d["id"] for d in st["deliveries"] if d["target"] == "webhook"} == \
        {b["id"] for b in bodies}
    # each mail is its delivery: the same id as Message-ID, whatever the mail system does with it
    mail_ids = {_mail(m)["Message-ID"].strip("<>").split("@")[0] for m in mails}
    assert mail_ids == {d["id"] for d in st["deliveries"] if d["target"] == "email"}

    # team B subscribed to everything a tenant may: nothing of team A's reached it, nor its outbox
    time.sleep(3)
    assert rx["b"].received == [] and not [m for m in smtp.messages
                                           if "ops@team-b.example" in m["to"]]
    from sqlalchemy import select

    from benchfarm.history import Database
    from benchfarm.history.schema import notification_outbox as t
    with Database.from_settings(Settings.from_env()).engine.connect() as conn:
        queued = conn.execute(select(t.c.namespace, t.c.notification)).all()
    assert (teams["b"], "all") not in {tuple(r) for r in queued}
    assert (a, "ci") in {tuple(r) for r in queued}
    st_b = _status(custom, "all", teams["b"])
    assert st_b["delivered"] == 0 and st_b["pending"] == 0, st_b


def test_team_as_finished_runs_are_submitted_to_kcidb(custom, teams):
    """Issue 43's automatic KCIDB submission: each finished run's document (read by the
    operator from the run and its metrics.json), with the namespace's bearer token."""
    a, rx = teams["a"], teams["receivers"]["kcidb"]
    got = wait_for("two KCIDB submissions", lambda: len(rx.received) >= 2 and rx.received,
                   timeout=60)
    numbers = {}
    for r in got:
        h = {k.lower(): v for k, v in r["headers"].items()}
        assert r["path"] == "/submit" and h["authorization"] == f"Bearer {KCIDB_TOKEN}", h
        doc = json.loads(r["body"])
        kcidb_io.schema.LATEST.validate(doc)
        for t in doc["tests"]:
            # the step's headline (beside it: its energy, average power, hackbench-time-energy)
            if "number" in t and t["path"].endswith(".hb.hackbench-time"):
                numbers[t["misc"]["run"]] = (t["number"], t["status"],
                                             t["environment"]["misc"]["deviceType"])
    assert numbers == {f"{a}/base": ({"value": 1.0, "unit": "s"}, "DONE", "qemu-x86"),
                       f"{a}/slower": ({"value": 2.0, "unit": "s"}, "FAIL", "qemu-x86")}, numbers
    st = wait_for("a/kcidb's status", lambda: (s := _status(custom, "kcidb", a)).get(
        "delivered") == 2 and s, timeout=30)
    assert {(d["target"], d["state"]) for d in st["deliveries"]} == {("kcidb", "Delivered")}
    assert "kcidb" in cond(st, "Ready")["message"], st


def test_a_receiver_down_gets_every_delivery_once_it_is_back(custom, teams):
    a, late = teams["a"], teams["receivers"]["late"]
    def failing():
        s = _status(custom, "late", a)
        tried = [d for d in s.get("deliveries") or [] if d["attempts"] >= 1]
        return cond(s, "Delivered").get("reason") == "Retrying" and len(tried) == 2 and s
    st = wait_for("a/late's two deliveries failing", failing, timeout=60)
    assert st["pending"] == 2 and cond(st, "Delivered")["status"] == "False", st
    assert all(d["state"] == "Retrying" for d in st["deliveries"]), st
    assert "no connection" in cond(st, "Delivered")["message"], st
    ids = {d["id"] for d in st["deliveries"]}
    late.start()                          # the receiver is back
    wait_for("both deliveries at the receiver that was down",
             lambda: len(late.received) >= 2, timeout=60)
    time.sleep(12)                        # longer than the lab's longest backoff (10 s)
    bodies = _verified(late.received, KEYS["a"])
    assert sorted(b["id"] for b in bodies) == sorted(ids)         # each once, none twice
    assert sorted(b["object"]["name"] for b in bodies) == ["base", "slower"]
    st = wait_for("a/late delivered", lambda: cond(s := _status(custom, "late", a), "Delivered")
                  .get("status") == "True" and s, timeout=30)
    assert st["delivered"] == 2 and st["pending"] == 0, st


def test_a_lease_is_told_granted_ending_and_ended(custom, teams):
    a, rx = teams["a"], teams["receivers"]
    before = len(rx["a"].received)
    apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "BoardLease",
                          "metadata": {"name": "desk", "namespace": a},
                          "spec": {"selector": {"deviceType": "qemu-x86"}, "duration": "5m",
                                   "user": "desk/alice"}}))

    def kinds() -> list[str]:
        return [b["kind"] for b in _verified(rx["a"].received[before:], KEYS["a"])]
    wait_for("LeaseGranted and LeaseEnding", lambda: {"LeaseGranted", "LeaseEnding"} <=
             set(kinds()), timeout=120)
    custom.patch_namespaced_custom_object(GROUP, VERSION, a, "boardleases", "desk",
                                          {"spec": {"release": True}})
    wait_for("LeaseEnded", lambda: "LeaseEnded" in kinds(), timeout=120)
    assert sorted(kinds()) == ["LeaseEnded", "LeaseEnding", "LeaseGranted"]
    ended = [b for b in _verified(rx["a"].received[before:], KEYS["a"])
             if b["kind"] == "LeaseEnded"][0]
    assert ended["object"] == {"kind": "BoardLease", "name": "desk", "namespace": a,
                               "uid": ended["object"]["uid"]}
    assert ended["notification"] == f"{a}/leases"
    assert rx["b"].received == []       # team B subscribed to leases too: not team A's
    mails = wait_for("the lease's three mails", lambda: len(
        m := [m for m in teams["smtp"].messages if m["to"] == ["desk@team-a.example"]]) >= 3
        and m, timeout=60)
    ending = [m for m in mails if "event: LeaseEnding" in _mail(m).get_content()]
    assert len(ending) == 1 and ending[0]["tls"], mails
    assert "raise spec.duration" in _mail(ending[0]).get_content()
    assert _mail(ending[0])["X-Benchfarm-Delivery"]


@pytest.mark.full   # make test stops the API server under runs (chaos); make test-full here too
def test_deliveries_go_on_while_the_api_server_is_away(custom, teams):
    """A delivery due while kube-apiserver is stopped reaches its receiver meanwhile (the
    signing key read before is used; the outbox is in the database, not the API), and the
    Notification's status says so once the API server is back."""
    a, late = teams["a"], teams["receivers"]["late"]
    late.stop()
    apply(_run("third", a, "1.000"))
    assert finished(custom, "third", a, timeout=300)["phase"] == "Succeeded"
    wait_for("a/late failing again", lambda: _status(custom, "late", a).get("pending") == 1,
             timeout=60)
    before = len(late.received)
    devlab.stop_process("kube-apiserver")
    try:
        late.start()
        wait_for("the delivery, with the API server away", lambda: len(late.received) > before,
                 timeout=60)
        (body,) = _verified(late.received[before:], KEYS["a"])
        assert body["object"]["name"] == "third"
    finally:
        devlab.up()
    st = wait_for("a/late's status after the outage", lambda: (
        s := _status(custom, "late", a)).get("delivered") == 3 and s, timeout=120)
    assert st["pending"] == 0 and cond(st, "Delivered")["status"] == "True", st


@pytest.mark.full   # ten minutes of waiting: make test-full (make test: the minute above)
def test_a_receiver_down_for_ten_minutes_gets_its_delivery_once(custom, teams):
    """Issue 43's outage: a receiver down for 10 minutes. The delivery is tried again all that
    time at the backoff's ceiling (10 s in the lab), never given up, and reaches the receiver
    once, with its id, once it is back."""
    a, late = teams["a"], teams["receivers"]["late"]
    late.stop()
    delivered = _status(custom, "late", a).get("delivered", 0)
    before = len(late.received)
    down = time.monotonic()
    apply(_run("long-outage", a, "1.000"))
    assert finished(custom, "long-outage", a, timeout=300)["phase"] == "Succeeded"
    wait_for("a/late failing", lambda: _status(custom, "late", a).get("pending") == 1,
             timeout=60)
    time.sleep(max(0.0, 600 - (time.monotonic() - down)))
    st = _status(custom, "late", a)
    (waiting,) = [d for d in st["deliveries"] if d["subject"].endswith("/long-outage")]
    assert waiting["state"] == "Retrying" and waiting["attempts"] >= 30, st
    assert len(late.received) == before and st["failed"] == 0, st
    late.start()
    wait_for("the delivery once the receiver is back", lambda: len(late.received) > before,
             timeout=60)
    time.sleep(12)                        # longer than the lab's longest backoff (10 s)
    (body,) = _verified(late.received[before:], KEYS["a"])
    assert body["object"]["name"] == "long-outage" and body["id"] == waiting["id"]
    wait_for("a/late delivered", lambda: _status(custom, "late", a).get("delivered") ==
             delivered + 1, timeout=30)


# -- bounded (issue 53) --------------------------------------------------------------------------
DEADLINE = 20.0        # the lab's BENCHFARM_NOTIFY_DEADLINE_SECONDS (the default)
SLOW_HOOKS = 10        # the trickling namespace's Notifications: more deliveries at once than
#                        there are delivery threads (8), which without turns it would all hold


def _slack(name: str, ns: str, port: int, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Notification",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"events": ["RunFinished"],
                     "webhook": {"url": f"http://127.0.0.1:{port}/hook", "format": "Slack"},
                     **spec}}


def _with_policy(custom, entries: list[dict] | None = None, drop: set[str] = frozenset()):
    """The live LabPolicy with these namespaces' entries added (or those of `drop` taken out):
    another fixture of this module may have entries of its own in force."""
    live = custom.get_cluster_custom_object(GROUP, VERSION, "labpolicies", "default")
    spec = live.get("spec") or {}
    spec["namespaces"] = [e for e in spec.get("namespaces") or []
                          if e["namespace"] not in drop] + (entries or [])
    apply(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy",
                          "metadata": {"name": "default"}, "spec": spec}))


@pytest.fixture(scope="module")
def bounded(kube, operator, custom):
    from kubernetes import client
    tag = uuid.uuid4().hex[:5]
    ns = {k: f"notify-{k}-{tag}" for k in ("slow", "quick", "capped")}
    first = devlab.PORTS.notify_receivers
    ports = {"slow": first + 4, "quick": first + 5, "capped": first + 6}
    for name in ns.values():
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": name}})
    receivers = {"slow": TricklingReceiver(ports["slow"], every=2.0).start(),
                 "quick": WebhookReceiver(ports["quick"]).start(),
                 "capped": WebhookReceiver(ports["capped"]).start()}
    _with_policy(custom, [
        {"namespace": ns["slow"], "webhookHosts": [f"127.0.0.1:{ports['slow']}"]},
        {"namespace": ns["quick"], "webhookHosts": [f"127.0.0.1:{ports['quick']}"]},
        {"namespace": ns["capped"], "webhookHosts": [f"127.0.0.1:{ports['capped']}"],
         "emailDomains": ["capped.example"],
         "notifications": {"maxNotifications": 3, "maxRecipients": 2,
                           "maxDeliveriesPerHour": 1}}])
    yield {"ns": ns, "receivers": receivers}
    for r in receivers.values():
        r.stop()
    _with_policy(custom, drop=set(ns.values()))
    for name in ns.values():
        client.CoreV1Api(kube).delete_namespace(name)


def test_a_trickling_receiver_delays_no_other_namespace_and_ends_at_the_deadline(custom,
                                                                                  bounded):
    """Namespace slow's receiver answers one byte every 2 s, for ever. Its ten Notifications
    make ten deliveries of one run at once, more than there are delivery threads: they go one
    at a time, each cut off at the attempt's deadline; namespace quick's delivery, due after
    them, goes at once."""
    ns, rx = bounded["ns"], bounded["receivers"]
    apply("---\n".join(yaml.safe_dump(_slack(f"hook-{i}", ns["slow"], rx["slow"].port))
                       for i in range(SLOW_HOOKS)) + "---\n" +
          yaml.safe_dump(_slack("hook", ns["quick"], rx["quick"].port)))
    for name, where in [*((f"hook-{i}", ns["slow"]) for i in range(SLOW_HOOKS)),
                        ("hook", ns["quick"])]:
        wait_for(f"{where}/{name} Ready", lambda name=name, where=where: cond(
            _status(custom, name, where), "Ready").get("status") == "True", timeout=60)
    apply(run_yaml("first", ns["slow"], plan="no-such-plan"))     # fails at once: RunFinished
    finished(custom, "first", ns["slow"], timeout=60)
    wait_for("the trickler's first connection", lambda: rx["slow"].connections, timeout=30)
    time.sleep(2)                        # every slow delivery is due by now
    began = time.monotonic()
    apply(run_yaml("second", ns["quick"], plan="no-such-plan"))
    finished(custom, "second", ns["quick"], timeout=60)
    wait_for("namespace quick's delivery", lambda: rx["quick"].received, timeout=DEADLINE)
    waited = time.monotonic() - began
    assert waited < DEADLINE / 2, f"namespace quick waited {waited:.1f} s behind the trickler"
    body = json.loads(rx["quick"].received[0]["body"])
    assert "/second " in body["text"], body

    held = wait_for("the trickler's first delivery to end", lambda: rx["slow"].held(),
                    timeout=DEADLINE + 15)
    assert DEADLINE - 1 <= held[0] <= DEADLINE + 4, held        # the client went at the deadline
    # one delivery of the namespace at a time: no two of its connections overlapped
    spans = sorted((c["opened"], c["closed"] or time.monotonic())
                   for c in list(rx["slow"].connections))
    assert all(b[0] >= a[1] - 0.5 for a, b in itertools.pairwise(spans)), spans
    failed = wait_for("a slow delivery's error", lambda: [
        d for i in range(SLOW_HOOKS) for d in _status(custom, f"hook-{i}", ns["slow"]).get(
            "deliveries") or [] if d.get("error")], timeout=30)
    assert f"deadline of {DEADLINE:g} s" in failed[0]["error"], failed


def test_over_its_caps_a_namespaces_notifications_say_so_and_send_nothing(custom, bounded):
    """maxNotifications 3, maxRecipients 2, emailDomains [capped.example] and
    maxDeliveriesPerHour 1: the oldest hook is in force, a mail to three people and one to
    another domain are not, a fourth Notification is not; of two runs' events one is
    delivered, the other refused."""
    ns, rx = bounded["ns"]["capped"], bounded["receivers"]["capped"]
    to = ["a@capped.example", "b@capped.example", "c@capped.example"]
    apply("---\n".join(yaml.safe_dump(d) for d in [
        _slack("n1-hook", ns, rx.port),
        {**_slack("n2-mail", ns, rx.port), "spec": {"events": ["RunFinished"],
                                                    "email": {"to": to}}},
        {**_slack("n3-away", ns, rx.port), "spec": {"events": ["RunFinished"],
                                                    "email": {"to": ["x@elsewhere.example"]}}},
        _slack("n4-more", ns, rx.port)]))
    ready = {name: wait_for(f"{ns}/{name} judged", lambda name=name: cond(
        _status(custom, name, ns), "Ready") or None, timeout=60)
        for name in ("n1-hook", "n2-mail", "n3-away", "n4-more")}
    assert ready["n1-hook"]["status"] == "True", ready
    assert (ready["n2-mail"]["status"], ready["n2-mail"]["reason"]) == (
        "False", "TooManyRecipients"), ready
    assert (ready["n3-away"]["status"], ready["n3-away"]["reason"]) == (
        "False", "EmailDomainForbidden"), ready
    assert "elsewhere.example is not on the namespace's emailDomains" in \
        ready["n3-away"]["message"]
    assert (ready["n4-more"]["status"], ready["n4-more"]["reason"]) == (
        "False", "TooManyNotifications"), ready

    for run in ("one", "two"):
        apply(run_yaml(run, ns, plan="no-such-plan"))
        finished(custom, run, ns, timeout=60)
    st = wait_for("n1-hook rate-limited", lambda: cond(
        s := _status(custom, "n1-hook", ns), "Delivered").get("reason") == "RateLimited" and s,
        timeout=60)
    assert "/two was not delivered" in cond(st, "Delivered")["message"], st
    assert "maxDeliveriesPerHour" in cond(st, "Delivered")["message"], st
    wait_for("the one delivery", lambda: rx.received, timeout=30)
    time.sleep(3)
    assert len(rx.received) == 1, rx.received       # the other run's event: not sent
    assert "/one " in json.loads(rx.received[0]["body"])["text"], rx.received
    st = wait_for("n1-hook's counts", lambda: (s := _status(custom, "n1-hook", ns)).get(
        "refused") == 1 and s.get("delivered") == 1 and s, timeout=30)
    assert {(d["subject"].split("/")[1], d["state"]) for d in st["deliveries"]} == {
        ("one", "Delivered"), ("two", "Refused")}, st
    from sqlalchemy import select

    from benchfarm.history import Database
    from benchfarm.history.schema import notification_outbox as t
    with Database.from_settings(Settings.from_env()).engine.connect() as conn:
        queued = conn.execute(select(t.c.notification, t.c.attempts).where(
            t.c.namespace == ns)).all()
    # nothing for the Notifications not in force; n1-hook's second never attempted
    assert sorted(tuple(r) for r in queued) == [("n1-hook", 0), ("n1-hook", 1)], queued

    # an older one deleted: the newest is among the oldest three, and in force
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "notifications", "n1-hook")
    wait_for("n4-more in force", lambda: cond(_status(custom, "n4-more", ns), "Ready").get(
        "status") == "True", timeout=60)
    assert cond(_status(custom, "n3-away", ns), "Ready")["reason"] == "EmailDomainForbidden"
