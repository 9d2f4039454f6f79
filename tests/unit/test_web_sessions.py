"""The dashboard's sign-in state (web/sessions.py): the bounded tables, the sessions, the failed
sign-ins' token bucket, the origin check and when the cookie is `Secure`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from benchfarm.web.sessions import (
    Expiring,
    FailedSignIns,
    Sessions,
    client_of,
    cookie_secure,
    cross_origin,
    proxies,
)

TOKEN = "eyJhbGciOiJSUzI1NiJ9.a-kubernetes-token.sig"


def test_a_table_drops_the_least_recently_used_and_what_expired():
    t: Expiring[str, int] = Expiring(size=3, ttl=10)
    for i, k in enumerate("abc"):
        t.put(k, i, now=0)
    assert t.get("a", now=1) == 0          # a used: b is now the least recently used
    t.put("d", 3, now=2)
    assert "b" not in t and len(t) == 3
    assert [t.get(k, now=2) for k in "acd"] == [0, 2, 3]
    assert t.get("a", now=10) is None and "a" not in t     # expired at put + ttl
    t.put("e", 4, now=10, ttl=1)
    assert t.get("e", now=10.5) == 4 and t.get("e", now=11) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=300))
def test_a_table_never_holds_more_than_its_size(ops):
    t: Expiring[int, int] = Expiring(size=8, ttl=5)
    for now, (key, put) in enumerate(ops):
        if put:
            t.put(key, key, now=now)
        else:
            assert t.get(key, now=now) in (None, key)
        assert len(t) <= 8


def test_a_session_is_an_opaque_id_that_expires_and_closes():
    s = Sessions(size=2, lifetime=100)
    sid = s.open(TOKEN, "alice", now=0)
    assert len(sid) >= 43 and TOKEN not in sid and "alice" not in sid
    assert s.open(TOKEN, "alice", now=0) != sid                   # random each time
    got = s.get(sid, now=50)
    assert got is not None and (got.token, got.user, got.expires) == (TOKEN, "alice", 100)
    assert TOKEN not in repr(got)
    assert s.get(sid, now=100) is None                            # its lifetime is over
    sid = s.open(TOKEN, "alice", now=200)
    s.close(sid)
    assert s.get(sid, now=201) is None
    assert s.get("", now=0) is None and s.get("made-up", now=0) is None


def test_sessions_are_bounded_the_least_recently_used_signed_out_first():
    s = Sessions(size=2, lifetime=1000)
    a, b = s.open("ta", "a", 0), s.open("tb", "b", 0)
    assert s.get(a, 1) is not None
    c = s.open("tc", "c", 2)
    assert s.get(b, 3) is None and s.get(a, 3) is not None and s.get(c, 3) is not None
    assert len(s) == 2


def test_one_user_signing_in_again_and_again_ends_only_their_own_oldest_sessions():
    s = Sessions(size=20, lifetime=1000, per_user=3)
    bob = s.open("tb", "bob", 0)
    mallory = [s.open("tm", "mallory", i) for i in range(50)]
    assert [s.get(m, 60) is not None for m in mallory[-4:]] == [False, True, True, True]
    assert s.get(bob, 60) is not None and len(s) == 4


def test_failed_sign_ins_a_burst_then_one_per_refill_and_forgotten_when_full():
    f = FailedSignIns(burst=3, refill=10, clients=100)
    for _ in range(3):
        assert f.wait("10.0.0.1", now=0) == 0
        f.failed("10.0.0.1", now=0)
    assert f.wait("10.0.0.1", now=0) == pytest.approx(10)
    assert f.wait("10.0.0.1", now=4) == pytest.approx(6)
    assert f.wait("10.0.0.2", now=0) == 0                      # another client is not held
    assert f.wait("10.0.0.1", now=10) == 0                     # one back after a refill
    f.failed("10.0.0.1", now=10)
    assert f.wait("10.0.0.1", now=10) == pytest.approx(10)
    assert f.wait("10.0.0.1", now=40) == 0
    assert "10.0.0.1" not in f._buckets or f._buckets.get("10.0.0.1", now=40) is None


def test_the_failure_table_is_bounded():
    f = FailedSignIns(burst=1, refill=60, clients=16)
    for i in range(1000):
        f.failed(f"10.0.{i // 256}.{i % 256}", now=0)
    assert len(f._buckets) == 16


def test_a_client_is_its_address_or_its_ipv6_64():
    assert client_of("192.0.2.7") == "192.0.2.7"
    assert client_of("2001:db8:1:2:3:4:5:6") == client_of("2001:db8:1:2:ffff::1") == \
        "2001:db8:1:2::/64"
    assert client_of("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_of(None) == "unknown"


def test_behind_a_trusted_proxy_the_client_is_the_last_address_it_did_not_add_itself():
    ingress = proxies("10.42.0.0/16, 192.0.2.1")
    # the ingress appended 198.51.100.7 (who connected to it); what came before is the client's
    assert client_of("10.42.3.4", "1.2.3.4, 198.51.100.7", ingress) == "198.51.100.7"
    assert client_of("10.42.3.4", "1.2.3.4, 198.51.100.7, 192.0.2.1", ingress) == "198.51.100.7"
    assert client_of("10.42.3.4", "", ingress) == "10.42.3.4"         # no header: the proxy
    assert client_of("10.42.3.4", "2001:db8::1", ingress) == "2001:db8::/64"
    # an untrusted peer's header is its own text: ignored
    assert client_of("203.0.113.9", "198.51.100.7", ingress) == "203.0.113.9"
    assert client_of("203.0.113.9", "198.51.100.7") == "203.0.113.9"
    assert len(client_of("10.42.3.4", "x" * 1000, ingress)) <= 64
    with pytest.raises(ValueError, match="not-a-cidr"):
        proxies("10.0.0.0/8,not-a-cidr")
    assert proxies(" ") == ()


@pytest.mark.parametrize(("origin", "referer", "host", "tls", "site"), [
    ("http://127.0.0.1:21088", None, "127.0.0.1:21088", False, ""),
    (None, "http://127.0.0.1:21088/signin?next=/lab", "127.0.0.1:21088", False, ""),
    ("https://dash.example", None, "dash.example", False, ""),        # TLS ended at the ingress
    ("https://dash.example", None, "dash.example:443", True, ""),
    ("https://DASH.example", None, "dash.example", False, ""),
    ("https://dash.example", None, "benchfarm-web.ns.svc", False, "https://dash.example/"),
])
def test_a_form_from_the_sites_own_page_is_taken(origin, referer, host, tls, site):
    assert cross_origin(origin, referer, host, tls, site) is None


@pytest.mark.parametrize(("origin", "referer", "host", "tls", "site"), [
    ("https://evil.example", None, "dash.example", False, ""),
    ("https://evil.example", "https://dash.example/signin", "dash.example", False, ""),
    ("null", None, "dash.example", False, ""),
    (None, None, "dash.example", False, ""),
    ("", "", "dash.example", False, ""),
    ("http://127.0.0.1:9999", None, "127.0.0.1:21088", False, ""),    # another port
    ("http://dash.example", None, "dash.example", True, ""),          # HTTP page, TLS request
    ("https://dash.example.evil.example", None, "dash.example", False, ""),
    ("https://dash.example:99999", None, "dash.example", False, ""),
    ("javascript:alert(1)", None, "dash.example", False, ""),
    ("https://evil.example", None, "benchfarm-web.ns.svc", False, "https://dash.example"),
])
def test_a_form_from_anywhere_else_is_refused_saying_why(origin, referer, host, tls, site):
    why = cross_origin(origin, referer, host, tls, site)
    assert why and "this site's own page" in why


def test_the_cookie_is_secure_unless_the_site_is_plain_http_on_loopback():
    assert not cookie_secure("auto", False, "127.0.0.1:21088", "127.0.0.1")   # the embedded lab
    assert not cookie_secure("auto", False, "localhost:8080", "::1")
    assert cookie_secure("auto", True, "127.0.0.1:21088", "127.0.0.1")        # TLS itself
    assert cookie_secure("auto", False, "dash.example", "10.1.2.3")           # behind an ingress
    assert cookie_secure("auto", False, "dash.example", "127.0.0.1")          # a proxy on the host
    assert cookie_secure("auto", False, "127.0.0.1:8080", "10.1.2.3")
    assert cookie_secure("auto", False, "", None)
    assert cookie_secure("always", False, "127.0.0.1", "127.0.0.1")
    assert not cookie_secure("never", True, "dash.example", "10.1.2.3")
