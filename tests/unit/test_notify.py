"""Notifications, the pure parts (`core.notifications`): events from objects, who is told, what a
receiver gets, its signature, the retry schedule, where a webhook may point and whom an e-mail
may go to, a namespace's caps and the delivery threads' turns; and one attempt of each delivery
(`notify.webhook`, `notify.mail`) against real receivers on loopback, a trickling one among
them, which the attempt's one deadline (`notify.deadline`) ends."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import ssl
import time

import pytest
from pydantic import ValidationError

from benchfarm.api.labpolicy import LabPolicySpec, NamespacePolicy
from benchfarm.api.notifications import (
    DeliveryState,
    Event,
    EventKind,
    NotificationBody,
    NotificationReason,
    NotificationSpec,
    ObjectRef,
    Target,
    WebhookFormat,
)
from benchfarm.core.notifications import rules as n
from benchfarm.core.notifications.bodies import body_of, email_text, sign, webhook_payload
from benchfarm.core.notifications.delivered import delivered_condition, delivery
from benchfarm.core.notifications.events import (
    board_event,
    campaign_event,
    change_point_event,
    lease_event,
    run_events,
)
from benchfarm.core.notifications.retry import NotifySettings, backoff
from benchfarm.core.notifications.webhooks import WebhookReach, ports
from benchfarm.notify import DeliveryFailed, mail, webhook
from benchfarm.notify.deadline import Deadline
from benchfarm.settings import SettingError, Settings
from tests.receivers import SmtpServer, TricklingReceiver, WebhookReceiver, tls_files

ADMIN = "benchfarm"


def run_body(ns="team-a", name="r1", uid="u-1", phase="Succeeded", done="2026-11-28T12:00:10Z",
             regressed=False):
    conditions = [{"type": "Succeeded", "status": "True" if phase == "Succeeded" else "False",
                   "reason": "Completed" if phase == "Succeeded" else "SuitesFailed",
                   "message": "2 of 2 suites passed"}]
    if regressed:
        conditions.append({"type": "Regressed", "status": "True", "reason": "MetricsRegressed",
                           "message": "hb/time: +12.0 % (p 0.01)"})
    return {"metadata": {"namespace": ns, "name": name, "uid": uid},
            "spec": {"selector": {"deviceType": "qemu-x86"}, "plan": "demo", "baseline": "r0"},
            "status": {"phase": phase, "completionTime": done, "board": "vb-x86-0",
                       "conditions": conditions, "results": {"hb/time": "1.00"}}}


def sub(ns="team-a", events=("RunFinished",), created="2026-11-28T12:00:00Z", uid="s-1",
        **spec):
    spec = {"events": list(events), "webhook": {"url": "https://hooks.example.com/x",
                                                "signingKey": "k"}, **spec}
    return n.Subscription(ns, "tell-me", uid, created, 1, NotificationSpec(**spec))


def test_a_finished_run_makes_its_events_once_by_key():
    assert run_events({**run_body(), "status": {"phase": "Running"}}) == []
    finished = run_events(run_body())
    assert [e.kind for e in finished] == [EventKind.run_finished]
    event = finished[0]
    assert event.key == "RunFinished/u-1" and event.namespace == "team-a"
    assert event.object == ObjectRef(kind="BenchmarkRun", name="r1", namespace="team-a", uid="u-1")
    assert event.details["phase"] == "Succeeded" and event.details["board"] == "vb-x86-0"
    assert "team-a/r1 Succeeded on vb-x86-0" in event.summary
    assert run_events(run_body()) == finished          # seen again: the same event
    regressed = run_events(run_body(regressed=True))
    assert [e.kind for e in regressed] == [EventKind.run_finished, EventKind.regression]
    assert "+12.0 %" in regressed[1].summary and "r0" in regressed[1].summary


def test_a_namespace_is_told_only_of_its_own_things_after_it_subscribed():
    a_run = run_events(run_body(ns="team-a"))[0]
    b_run = run_events(run_body(ns="team-b", uid="u-2"))[0]
    team_b = sub(ns="team-b", uid="s-b")
    assert n.subscribed(sub(), a_run, ADMIN)
    assert not n.subscribed(team_b, a_run, ADMIN)     # team B never hears of team A's run
    assert n.subscribed(team_b, b_run, ADMIN)
    assert n.matches([sub(), team_b], a_run, ADMIN) == [sub()]
    # the admin's namespace is no wildcard for runs either
    assert not n.subscribed(sub(ns=ADMIN), a_run, ADMIN)
    # older than the subscription: not delivered (a restart sees every finished run again)
    assert not n.subscribed(sub(created="2026-11-28T12:00:11Z"), a_run, ADMIN)
    assert not n.subscribed(sub(events=("Regression",)), a_run, ADMIN)


def test_run_finished_filters_by_outcome():
    failed = run_events(run_body(phase="Failed"))[0]
    assert n.subscribed(sub(outcomes=["Failed"]), failed, ADMIN)
    assert not n.subscribed(sub(outcomes=["Succeeded", "Cancelled"]), failed, ADMIN)
    assert n.subscribed(sub(outcomes=[]), failed, ADMIN)


def test_board_events_are_the_lab_admins_only():
    event = board_event(EventKind.board_quarantined, "vb-x86-1", "2026-11-28T12:00:10Z",
                          "vb-x86-1 quarantined after 2 board faults")
    assert event.key == "BoardQuarantined/vb-x86-1/2026-11-28T12:00:10Z"
    admin = sub(ns=ADMIN, events=("BoardQuarantined", "BoardBack"))
    tenant = sub(events=("BoardQuarantined",))
    assert n.subscribed(admin, event, ADMIN) and not n.subscribed(tenant, event, ADMIN)
    reach = WebhookReach(("hooks.example.com",))
    problem = n.spec_problem(tenant, ADMIN, reach, True, True)
    assert problem is not None and problem[0] == NotificationReason.lab_admin_only
    assert n.spec_problem(admin, ADMIN, reach, True, True) is None


def test_leases_campaigns_and_change_points_have_keys_of_their_own():
    meta = {"namespace": "team-a", "name": "l1", "uid": "lu"}
    granted = lease_event(EventKind.lease_granted, meta, {"grantedAt": "T1", "place": "p"},
                            "2026-11-28T12:00:10Z", "p granted")
    ending = lease_event(EventKind.lease_ending, meta, {"expiresAt": "T2"},
                           "2026-11-28T12:00:10Z", "p is powered off in 300 s")
    extended = lease_event(EventKind.lease_ending, meta, {"expiresAt": "T3"},
                             "2026-11-28T12:00:10Z", "p is powered off in 300 s")
    ended = lease_event(EventKind.lease_ended, meta, {}, "2026-11-28T12:00:10Z", "ended")
    assert len({granted.key, ending.key, extended.key, ended.key}) == 4   # an extension warns again
    campaign = {"metadata": {"namespace": "team-a", "name": "c", "uid": "cu", "generation": 1},
                "spec": {"release": "11.1"},
                "status": {"phase": "Succeeded", "changes": {"md": "s3://b/changes.md"},
                           "conditions": [
                               {"type": "Succeeded", "status": "True", "reason": "Published",
                                "message": "guide published",
                                "lastTransitionTime": "2026-11-28T12:00:10Z"},
                               {"type": "Regressed", "status": "True", "message": "2 regressed"}]}}
    event = campaign_event(campaign)
    assert event is not None and event.details["changes"] == {"md": "s3://b/changes.md"}
    assert "2 regressed" in event.summary and event.key == "CampaignFinished/cu/1"
    running = {**campaign, "status": {"conditions": [{"type": "Succeeded", "status": "Unknown",
                                                      "lastTransitionTime": "x"}]}}
    assert campaign_event(running) is None
    point = change_point_event("team-a", "r5", "u5", {"metric": "hb/time", "deviceType": "x",
                                                        "plan": "p"}, "2026-11-28T12:00:10Z",
                                 "regressed +100 %", {"magnitude": 100.0})
    assert point.key == "ChangePoint/team-a/hb/time/x/p/u5" and point.namespace == "team-a"


def test_a_delivery_keeps_its_id_and_its_signature_is_hmac_sha256_over_timestamp_and_body():
    event = run_events(run_body())[0]
    s = sub()
    body = body_of(event, s, Target.webhook)
    assert body.id == body_of(event, s, Target.webhook).id            # every retry, restart
    assert body.id != body_of(event, s, Target.email).id              # one per target
    assert body.id != body_of(event, sub(uid="s-2"), Target.webhook).id
    payload = webhook_payload(body, WebhookFormat.json)
    assert NotificationBody.model_validate_json(payload) == body
    assert json.loads(payload)["notification"] == "team-a/tell-me"
    key, stamp = b"s3cr3t", 1764331210
    expected = hmac.new(key, b"1764331210." + payload, hashlib.sha256).hexdigest()
    assert sign(key, stamp, payload) == f"sha256={expected}"
    assert sign(key, stamp + 1, payload) != sign(key, stamp, payload)   # replay: stale stamp
    slack = json.loads(webhook_payload(body, WebhookFormat.slack))
    assert list(slack) == ["text"] and "team-a/r1 Succeeded" in slack["text"]
    subject, text = email_text(body)
    assert subject.startswith("[benchfarm] run team-a/r1 Succeeded") and "\n" not in subject
    assert body.id in text and "board: vb-x86-0" in text


def test_backoff_doubles_to_its_ceiling_spread_by_delivery():
    settings = NotifySettings(backoff_seconds=2, backoff_max_seconds=300)
    waits = [backoff(a, "d-1", settings) for a in range(1, 12)]
    bases = [2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
    for wait, base in zip(waits, bases, strict=True):
        assert base * 0.9 <= wait <= base
    assert waits == [backoff(a, "d-1", settings) for a in range(1, 12)]   # deterministic
    assert waits != [backoff(a, "d-2", settings) for a in range(1, 12)]   # spread
    assert backoff(10_000, "d-1", settings) <= 300


def _notify_settings(env):
    from benchfarm.operator.notifications.notifier import notify_settings_from
    return notify_settings_from(Settings.from_env(env))


def test_settings_are_read_and_refused_by_name():
    s = _notify_settings({"BENCHFARM_WEBHOOK_LOOPBACK_PORTS": "8080, 27060-27062",
                          "BENCHFARM_NOTIFY_BACKOFF_SECONDS": "0.5"})
    assert s.loopback_ports == {8080, 27060, 27061, 27062} and s.backoff_seconds == 0.5
    with pytest.raises(ValueError, match="LOOPBACK_PORTS"):
        ports("80-x")
    with pytest.raises(ValueError, match="LOOPBACK_PORTS"):
        _notify_settings({"BENCHFARM_WEBHOOK_LOOPBACK_PORTS": "80-x"})
    with pytest.raises(SettingError, match="BACKOFF_MAX"):
        _notify_settings({"BENCHFARM_NOTIFY_BACKOFF_MAX_SECONDS": "-1"})
    assert mail.SmtpSettings.from_settings(Settings.from_env({})) is None
    smtp = mail.SmtpSettings.from_settings(Settings.from_env({"BENCHFARM_SMTP_HOST": "mail.lab"}))
    assert smtp is not None and (smtp.port, smtp.sender) == (587, "benchfarm@localhost")


@pytest.mark.parametrize("url, why", [
    ("http://127.0.0.1:9000/x", "loopback"),
    ("http://[::1]:9000/x", "loopback"),
    ("http://169.254.169.254/latest", "link-local"),
    ("http://10.1.2.3/x", "private"),
    ("http://10.96.0.1/x", "internal range"),
    ("http://[::ffff:10.1.2.3]/x", "private"),
    ("https://evil.example.com/x", "not on the namespace's webhookHosts"),
    ("https://user:pw@hooks.example.com/x", "user names"),
    ("ftp://hooks.example.com/x", "only http"),
    ("https://hooks.example.com/x\\y", "backslashes"),
])
def test_webhook_urls_pass_the_checks_of_software_urls(url, why):
    reach = WebhookReach(("hooks.example.com", "192.168.7.7"),
                           (ipaddress.ip_network("10.96.0.0/12"),))
    problem = reach.url_problem(url)
    assert problem is not None and why in problem, problem


def test_listed_private_addresses_and_the_labs_own_loopback_ports_are_allowed():
    reach = WebhookReach(("hooks.example.com", "192.168.7.7", "127.0.0.1:27060"),
                           loopback_ports=frozenset({27060}))
    assert reach.url_problem("https://hooks.example.com/services/x") is None
    assert reach.url_problem("http://192.168.7.7:8080/x") is None       # the address, listed
    assert reach.url_problem("http://127.0.0.1:27060/hook") is None     # the lab opened it
    assert "loopback" in reach.url_problem("http://127.0.0.1:27061/hook")
    # a name that resolves to a private address is refused where it resolves (notify.webhook)
    assert reach.address_problem(ipaddress.ip_address("10.0.0.5"), 443) is not None
    # the lab's ports, not listed for this namespace
    assert "webhookHosts" in WebhookReach((), loopback_ports=frozenset({27060})).url_problem(
        "http://127.0.0.1:27060/hook")


def test_a_notification_that_cannot_be_in_force_says_why():
    s = sub(webhook={"url": "http://10.0.0.9/hook", "signingKey": "k"})
    reach = WebhookReach(("hooks.example.com",))
    assert n.spec_problem(s, ADMIN, reach, True, True)[0] == NotificationReason.webhook_forbidden
    mail_only = sub(webhook=None, email={"to": ["ci@team-a.example"]})
    assert n.spec_problem(mail_only, ADMIN, reach, False, True)[0] == \
        NotificationReason.email_not_configured
    assert n.spec_problem(mail_only, ADMIN, reach, True, False)[0] == NotificationReason.no_outbox
    assert n.spec_problem(mail_only, ADMIN, reach, True, True, ("Team-A.example",)) is None
    policy = LabPolicySpec(namespaces=[{"namespace": "team-a",
                                        "webhookHosts": ["hooks.example.com"]}])
    assert policy.for_namespace("team-a").webhookHosts == ["hooks.example.com"]
    assert policy.for_namespace("team-b").webhookHosts == []


def test_e_mail_goes_only_to_the_domains_the_lab_listed_for_the_namespace():
    to = ["ci@team-a.example", "boss@eng.team-a.example"]
    assert n.email_problem(to, ("team-a.example", "eng.team-a.example")) is None
    why = n.email_problem(to, ("team-a.example",))
    assert why is not None and why.startswith("boss@eng.team-a.example: domain eng.team-a")
    assert "it may mail: team-a.example" in why        # exactly: no subdomains
    assert "it may mail: none" in n.email_problem(["a@team-a.example"], ())
    assert n.email_problem(["a@team-a.example.org"], ("team-a.example",)) is not None
    # the default policy lists none: the lab's relay mails nobody until the lab says whom
    assert LabPolicySpec().for_namespace("team-a").emailDomains == []


def _policy(**limits) -> NamespacePolicy:
    return NamespacePolicy(namespace="team-a", emailDomains=["team-a.example"],
                           notifications=limits)


def _judge(subs, policy) -> dict[str, tuple]:
    return n.judge(subs, policy, ADMIN, WebhookReach(("hooks.example.com",)), True, True)


def test_a_namespace_has_the_oldest_of_its_notifications_in_force_up_to_its_cap():
    subs = [sub(uid=f"s-{i}", created=f"2026-11-28T12:00:0{i}Z") for i in range(5)]
    problems = _judge(reversed(subs), _policy(maxNotifications=3))     # in any order
    assert sorted(problems) == ["s-3", "s-4"]
    reason, message = problems["s-3"]
    assert reason == NotificationReason.too_many_notifications
    assert "has 5 Notifications" in message and "lets 3 be in force" in message
    # past the cap even a valid one is refused, and a broken one inside it keeps its slot
    broken = sub(uid="s-0", created="2026-11-28T12:00:00Z",
                 webhook={"url": "http://10.0.0.9/hook", "signingKey": "k"})
    problems = _judge([broken, *subs[1:]], _policy(maxNotifications=3))
    assert problems["s-0"][0] == NotificationReason.webhook_forbidden
    assert sorted(problems) == ["s-0", "s-3", "s-4"]
    assert _judge(subs, _policy(maxNotifications=0)).keys() == {s.uid for s in subs}
    assert _judge(subs, _policy()) == {}                               # 20 by default


def test_a_namespaces_recipients_are_counted_distinct_oldest_first_up_to_its_cap():
    def mailing(i: int, *to: str):
        return sub(uid=f"m-{i}", created=f"2026-11-28T12:00:0{i}Z", webhook=None,
                   email={"to": list(to)})
    subs = [mailing(0, "a@team-a.example", "b@team-a.example"),
            mailing(1, "B@team-a.example", "c@team-a.example"),      # b again: one more, c
            mailing(2, "d@team-a.example", "e@team-a.example"),      # 5: over 4
            mailing(3, "a@team-a.example"),                          # nothing new: in force
            mailing(4, "x@elsewhere.example")]                       # not a listed domain
    problems = _judge(subs, _policy(maxRecipients=4))
    assert sorted(problems) == ["m-2", "m-4"]
    assert problems["m-2"][0] == NotificationReason.too_many_recipients
    assert "would be 5" in problems["m-2"][1] and "them be 4" in problems["m-2"][1]
    assert problems["m-4"][0] == NotificationReason.email_forbidden
    # a refused one's recipients are not counted: with room for 5, m-2 fits
    assert sorted(_judge(subs, _policy(maxRecipients=5))) == ["m-4"]


def test_namespaces_take_turns_for_the_delivery_threads():
    assert n.take_turns(["b", "a", "c"], {}, 2) == ["a", "b"]          # never served: by name
    turns = {"a": 7, "b": 3}
    assert n.take_turns(["a", "b", "c"], turns, 3) == ["c", "b", "a"]  # longest ago first
    assert n.take_turns(["a", "b"], turns, 0) == []
    # a namespace with a backlog, served each time a thread is free, still waits for the others
    order, turns, turn = [], {}, 0
    for _ in range(6):
        (ns,) = n.take_turns(["busy", "x", "y"], turns, 1)
        turn += 1
        turns[ns] = turn
        order.append(ns)
    assert order == ["busy", "x", "y", "busy", "x", "y"]
    assert "maxDeliveriesPerHour" in n.rate_limited("team-a", 300, "RunFinished", "team-a/r1")


def test_the_deadline_is_read_from_the_environment():
    assert _notify_settings({}).deadline_seconds == 20.0
    assert _notify_settings({"BENCHFARM_NOTIFY_DEADLINE_SECONDS": "5"}).deadline_seconds == 5.0
    with pytest.raises(SettingError, match="BENCHFARM_NOTIFY_DEADLINE_SECONDS"):
        _notify_settings({"BENCHFARM_NOTIFY_DEADLINE_SECONDS": "0"})


def test_a_kcidb_endpoint_gets_finished_runs_only_and_is_checked_as_a_webhook():
    both = sub(events=("RunFinished", "Regression"),
               kcidb={"url": "https://kcidb.example.org/submit", "tokenKey": "kcidb"})
    assert both.targets(EventKind.run_finished) == [Target.webhook, Target.kcidb]
    assert both.targets(EventKind.regression) == [Target.webhook]
    assert both.targets() == [Target.webhook, Target.kcidb]
    assert n.spec_problem(both, ADMIN, WebhookReach(("hooks.example.com",)), True, True) == (
        NotificationReason.webhook_forbidden,
        "kcidb https://kcidb.example.org/submit: host kcidb.example.org:443 is not on the "
        "namespace's webhookHosts (LabPolicy); it may post to: hooks.example.com")
    assert n.spec_problem(both, ADMIN, WebhookReach(("hooks.example.com",
                                                       "kcidb.example.org")), True, True) is None


def test_the_spec_refuses_what_the_crd_does():
    with pytest.raises(ValidationError):
        NotificationSpec(events=["Nonsense"], email={"to": ["a@b.example"]})
    with pytest.raises(ValidationError):
        NotificationSpec(events=["RunFinished"], email={"to": ["not an address"]})
    with pytest.raises(ValidationError):
        NotificationSpec(events=["RunFinished"], email={"to": []})


def test_the_delivered_condition_says_what_failed_last():
    assert delivered_condition([])[0] == "Unknown"
    ok = {"id": "d1", "event_kind": "RunFinished", "subject": "team-a/r1", "target": "webhook",
          "attempts": 1, "delivered": "t", "failed": None, "last_error": ""}
    failing = {**ok, "id": "d2", "attempts": 3, "delivered": None,
               "last_error": "the receiver answered HTTP 503"}
    assert delivered_condition([ok])[:2] == ("True", NotificationReason.delivered)
    status, reason, message = delivered_condition([ok, failing])
    assert (status, reason) == ("False", NotificationReason.retrying) and "HTTP 503" in message
    assert delivered_condition([{**failing, "failed": "t"}])[1] == NotificationReason.gave_up
    # the newest event's delivery refused over maxDeliveriesPerHour: never attempted, kept done
    why = n.rate_limited("team-a", 1, "RunFinished", "team-a/r2")
    refused = {**ok, "id": "d3", "attempts": 0, "delivered": None, "failed": "t",
               "last_error": why, "created": 2}
    assert delivered_condition([{**ok, "created": 1}, refused]) == (
        "False", NotificationReason.rate_limited, why)
    assert delivered_condition([{**ok, "created": 3}, refused])[0] == "True"   # newer went
    assert delivery({**refused, "created": None}).state == DeliveryState.refused
    assert delivery({**failing, "failed": "t", "created": None}).state == DeliveryState.failed


# -- one attempt, against real receivers on loopback ---------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_webhook_post_reaches_a_real_receiver_and_follows_no_redirect():
    receiver = WebhookReceiver().start()
    try:
        reach = WebhookReach((f"127.0.0.1:{receiver.port}",),
                               loopback_ports=frozenset({receiver.port}))
        assert webhook.post(receiver.url, b'{"a": 1}', {"X-Test": "1"}, reach) == 200
        assert receiver.received[0]["body"] == b'{"a": 1}'
        assert receiver.received[0]["headers"]["X-Test"] == "1"
        with pytest.raises(DeliveryFailed, match="loopback"):
            webhook.post(receiver.url, b"{}", {}, WebhookReach((f"127.0.0.1:{receiver.port}",)))
        receiver.answer = 302
        with pytest.raises(DeliveryFailed, match="redirects are not followed"):
            webhook.post(receiver.url, b"{}", {}, reach)
        receiver.answer = 503
        with pytest.raises(DeliveryFailed, match="HTTP 503"):
            webhook.post(receiver.url, b"{}", {}, reach)
    finally:
        receiver.stop()
    with pytest.raises(DeliveryFailed, match="no connection"):     # the receiver is down
        webhook.post(receiver.url, b"{}", {}, reach)


def test_an_email_goes_over_starttls_with_a_verified_certificate(tmp_path):
    cert, key, ca = tls_files(tmp_path)
    server = SmtpServer(_free_port(), cert, key).start()
    try:
        settings = mail.SmtpSettings(host="127.0.0.1", port=server.port,
                                     sender="benchfarm@lab.example", ca_file=str(ca))
        event = Event(kind=EventKind.run_finished, key="k", namespace="team-a",
                      occurredAt="2026-11-28T12:00:10Z",
                      object=ObjectRef(kind="BenchmarkRun", name="r1", namespace="team-a"),
                      summary="run team-a/r1 Succeeded")
        body = body_of(event, sub(), Target.email)
        subject, text = email_text(body)
        mail.send(settings, ["ci@team-a.example"], subject, text, body.id)
        (got,) = server.wait(1)
        assert got["tls"] and got["to"] == ["ci@team-a.example"]
        assert f"Message-ID: <{body.id}@benchfarm>".encode() in got["content"]
        # a server certificate the operator cannot verify: no mail
        other = tls_files(tmp_path / "other")[2]
        with pytest.raises(DeliveryFailed, match="certificate"):
            mail.send(mail.SmtpSettings(host="127.0.0.1", port=server.port,
                                        ca_file=str(other)), ["x@y.example"], "s", "t", "d")
        assert len(server.messages) == 1
    finally:
        server.stop()


def test_a_receiver_that_trickles_is_cut_off_at_the_attempts_deadline():
    """A byte every 0.2 s never lets a read time out; the attempt ends at its deadline anyway,
    and so does one whose receiver accepts and says nothing."""
    for receiver in (TricklingReceiver(every=0.2).start(),
                     TricklingReceiver(every=0.2, answer=b"", read_first=True).start()):
        try:
            reach = WebhookReach((f"127.0.0.1:{receiver.port}",),
                                   loopback_ports=frozenset({receiver.port}))
            began = time.monotonic()
            with pytest.raises(DeliveryFailed, match="deadline of 1.5 s"):
                webhook.post(receiver.url, b"{}", {}, reach, seconds=1.5)
            assert 1.4 < time.monotonic() - began < 2.5
        finally:
            receiver.stop()


def test_an_smtp_server_that_trickles_is_cut_off_at_the_deadline():
    receiver = TricklingReceiver(every=0.2, answer=b"220 slow.example ESMTP",
                                 read_first=False).start()
    try:
        began = time.monotonic()
        with pytest.raises(DeliveryFailed, match="deadline of 1.5 s"):
            mail.send(mail.SmtpSettings(host="127.0.0.1", port=receiver.port), ["a@b.example"],
                      "s", "t", "d", seconds=1.5)
        assert 1.4 < time.monotonic() - began < 2.5
    finally:
        receiver.stop()


def test_a_tls_peer_that_trickles_after_the_handshake_is_cut_off_at_the_deadline(tmp_path):
    cert, key, ca = tls_files(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    receiver = TricklingReceiver(every=0.2, context=server, read_first=False).start()
    try:
        deadline = Deadline(1.5)
        sock = deadline.tls(ssl.create_default_context(cafile=str(ca))).wrap_socket(
            deadline.socket(), server_hostname="127.0.0.1")
        sock.connect(("127.0.0.1", receiver.port))            # and the handshake
        got = b""
        with pytest.raises(TimeoutError):       # the read the deadline ends, or the next one
            while True:
                got += sock.recv(1)
        assert got.startswith(b"HTTP/1.1") and deadline.passed
        assert deadline.clock() - deadline.at < 0.5
        sock.close()
    finally:
        receiver.stop()
