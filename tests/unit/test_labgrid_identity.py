"""Who a labgrid client is (core.policy.identity): a certificate's grants against the name a
client claims and the calls it makes; and the labgrid code lab.labgrid_compat patches and
lab.labgrid_client subclasses and copies, as it was when they were written (labgrid 26.0.1): these
fail when labgrid changes under them."""

from __future__ import annotations

import base64
import datetime as dt
import inspect

import pytest

from benchfarm.core.policy import identity as ids
from benchfarm.settings import Settings


def held(*pairs: tuple[str, str]) -> list[ids.Grant]:
    return ids.grants(ids.grant_uri(r, n) for r, n in pairs)


@pytest.mark.parametrize("grants, claimed, ok", [
    ([("session", "benchfarm/run-a")], "benchfarm/run-a", True),
    ([("session", "benchfarm/run-a")], "benchfarm/run-b", False),
    ([("session", "benchfarm/run-a")], "benchfarm/run-a/x", False),
    ([("person", "desk/carol")], "desk/carol", True),
    ([("person", "desk/carol")], "desk/dave", False),
    ([("person", "desk/carol")], "benchfarm/lease-1", False),
    ([("operator", "operator/benchfarm"), ("operator", "benchfarm/*")], "operator/benchfarm", True),
    ([("operator", "operator/benchfarm"), ("operator", "benchfarm/*")], "benchfarm/run-x", True),
    ([("operator", "operator/benchfarm"), ("operator", "benchfarm/*")], "benchfarm/", False),
    ([("operator", "operator/benchfarm"), ("operator", "benchfarm/*")], "benchfarm/a/b", False),
    ([("operator", "operator/benchfarm"), ("operator", "benchfarm/*")], "benchfarmx/run", False),
    ([("operator", "operator/benchfarm"), ("operator", "benchfarm/*")], "desk/carol", False),
    ([("operator", "*")], "desk/carol", True),
    ([("exporter", "exporter-a")], "exporter-a", False),
    ([], "benchfarm/run-a", False),
])
def test_a_certificate_names_what_it_may_claim(grants, claimed, ok) -> None:
    assert ids.may_claim(held(*grants), claimed) is ok


def test_an_exporter_is_its_own_name_only() -> None:
    g = held(("exporter", "exporter-a"))
    assert ids.may_export(g, "exporter-a")
    assert not ids.may_export(g, "exporter-b")
    assert not ids.may_export(held(("operator", "*")), "exporter-a")


@pytest.mark.parametrize("role, name", [
    ("person", "desk/*"), ("session", "benchfarm/*"), ("person", "*"), ("person", "carol"),
    ("person", "a/b/c"), ("person", "d:esk/carol"), ("exporter", "a/b"), ("exporter", "*"),
    ("admin", "desk/carol"), ("operator", "*/x"), ("person", "desk/ca rol"),
])
def test_no_wildcard_or_malformed_name_but_the_operators(role, name) -> None:
    with pytest.raises(ValueError):
        ids.grant_uri(role, name)
    assert ids.grants([f"labgrid:{role}:{name}"]) == []


def test_other_uris_grant_nothing() -> None:
    assert ids.grants(["spiffe://lab/desk/carol", "https://x/", "labgrid", "labgrid:person"]) == []


@pytest.mark.parametrize("method", sorted(ids.PLACE_ADMIN | ids.HOLDING | ids.READING))
def test_calls_by_role(method: str) -> None:
    op, run, person = (held(("operator", "benchfarm/*")), held(("session", "benchfarm/run-a")),
                       held(("person", "desk/carol")))
    assert ids.may_call(op, "benchfarm/run-a", method)
    assert ids.may_call(run, "benchfarm/run-a", method) is (method not in ids.PLACE_ADMIN)
    assert ids.may_call(person, "desk/carol", method) is (method in ids.READING)
    assert not ids.may_call(person, None, method)            # no stream: no call
    assert not ids.may_call(run, "benchfarm/run-b", method)  # a claim it does not hold


def test_a_certificate_that_names_places_acquires_only_those() -> None:
    run = held(("session", "benchfarm/run-a"), ("place", "vb-x86-1"))
    assert ids.may_acquire(run, "benchfarm/run-a", "vb-x86-1")
    assert not ids.may_acquire(run, "benchfarm/run-a", "vb-x86-0")
    assert ids.may_acquire(held(("session", "benchfarm/run-a")), "benchfarm/run-a", "vb-x86-0")
    assert ids.may_acquire(held(("operator", "*"), ("place", "x")), "desk/carol", "vb-x86-0")
    assert not ids.may_claim(held(("place", "vb-x86-1")), "vb-x86-1")


def test_only_the_holder_or_the_operator_releases() -> None:
    run = held(("session", "benchfarm/run-a"))
    assert ids.may_release(run, "benchfarm/run-a", "benchfarm/run-a")
    assert not ids.may_release(run, "benchfarm/run-a", "benchfarm/run-b")
    assert ids.may_release(held(("operator", "benchfarm/*")), "benchfarm/x", "benchfarm/run-b")


def test_issued_certificates_carry_the_grants_and_expire_as_asked(tmp_path) -> None:
    from benchfarm.lab.labgrid_pki import Issuer, expiry, grant_uris, make_ca, write_private
    ca, key = make_ca("unit CA")
    write_private(tmp_path / "ca.crt", ca)
    write_private(tmp_path / "ca.key", key)
    issuer = Issuer.load(tmp_path / "ca.crt", tmp_path / "ca.key")
    end = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(minutes=30)
    cert, _ = issuer.issue_with_key(common_name="desk/carol", grants=[("person", "desk/carol")],
                                    not_after=end)
    assert grant_uris(cert.encode()) == ["labgrid:person:desk/carol"]
    assert expiry(cert) == end
    assert (tmp_path / "ca.key").stat().st_mode & 0o077 == 0


def test_a_lease_public_key_must_be_a_real_one() -> None:
    from benchfarm.lab.labgrid_pki import load_public, new_key, public_pem
    assert load_public(public_pem(new_key()))
    with pytest.raises(ValueError):
        load_public("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")


# -- what lab.labgrid_compat patches, as labgrid 26.0.1 has it ----------------------------------
def test_labgrid_is_the_version_the_patches_were_written_for() -> None:
    from benchfarm.lab import labgrid_compat
    assert labgrid_compat.labgrid_version_matches(), (
        "labgrid changed: check lab.labgrid_compat's patches against it, then its LABGRID_VERSION")


def test_patch_1_exporter_builds_its_channel_in_init() -> None:
    from labgrid.remote import exporter
    init = inspect.getsource(exporter.Exporter.__init__)
    assert "self.channel = grpc.aio.insecure_channel(" in init and "self.stub = " in init
    assert "exporter = Exporter(config)" in inspect.getsource(exporter.amain)


def test_patches_2_3_coordinator_serve_binds_insecure_and_builds_the_module_class() -> None:
    from labgrid.remote import coordinator
    serve = inspect.getsource(coordinator.serve)
    assert "grpc.aio.server(" in serve and "server.add_insecure_port(listen)" in serve
    assert "coordinator = Coordinator()" in serve
    stream = inspect.getsource(coordinator.Coordinator.ClientStream)
    assert 'name = in_msg.startup.name' in stream and "self.clients[peer]" in stream
    for method in ids.PLACE_ADMIN | ids.HOLDING | ids.READING:
        assert hasattr(coordinator.Coordinator, method), method
    release = inspect.getsource(coordinator.Coordinator.ReleasePlace)
    assert "place.acquired != fromuser" in release


def test_patch_4_labgrid_starts_every_ssh_with_the_class_base_args(tmp_path) -> None:
    from labgrid.util import ssh

    from benchfarm.lab import labgrid_compat
    source = inspect.getsource(ssh)
    assert "SSHConnection._get_ssh_base_args()" in source     # called by its class name
    assert isinstance(inspect.getattr_static(ssh.SSHConnection, "_get_ssh_base_args"),
                      staticmethod)
    own = ssh.SSHConnection._get_ssh_base_args   # patched already where a stack test ran first
    try:
        labgrid_compat.use_ssh_config(str(tmp_path / "other"))
        labgrid_compat.use_ssh_config(str(tmp_path / "ssh_config"))
        labgrid_compat.use_ssh_config(str(tmp_path / "ssh_config"))     # idempotent
        base = labgrid_compat._SSH_BASE_ARGS["base"]       # labgrid's own, kept at the first
        assert "-F" not in base()
        # one -F: a second config replaces the first, never adds to it
        assert ssh.SSHConnection._get_ssh_base_args() == [*base(), "-F",
                                                          str(tmp_path / "ssh_config")]
        with pytest.raises(Exception, match="has a space in it"):
            labgrid_compat.use_ssh_config("/a path/ssh_config")
    finally:
        ssh.SSHConnection._get_ssh_base_args = staticmethod(own)


def test_patch_5_labgrid_asks_the_session_who_it_is() -> None:
    from labgrid.remote.client import ClientSession

    from benchfarm.lab import labgrid_compat
    assert 'os.environ.get("LG_HOSTNAME"' in inspect.getsource(ClientSession.gethostname)
    assert 'os.environ.get("LG_USERNAME"' in inspect.getsource(ClientSession.getuser)
    for checks in (ClientSession._check_allowed, ClientSession.get_idle_place):
        assert "self.gethostname()" in inspect.getsource(checks)
    assert "self.getuser()" in inspect.getsource(ClientSession.start)

    class Session:
        pass
    s = Session()
    labgrid_compat.claim_identity(s, "benchfarm", "run-1")
    assert (s.gethostname(), s.getuser()) == ("benchfarm", "run-1")


def test_patches_6_7_the_remote_place_manager_keeps_a_session_and_its_resources() -> None:
    from labgrid.resource.remote import RemotePlaceManager

    from benchfarm.lab import labgrid_compat
    start = inspect.getsource(RemotePlaceManager._start)
    assert "if self.session:" in start and "return" in start    # ours is kept, none made
    added = inspect.getsource(RemotePlaceManager.on_resource_added)
    assert "self.session.get_place(" in added and "self.unmanaged_resources.append(" in added
    assert "self.resources + self.unmanaged_resources" in inspect.getsource(
        RemotePlaceManager.poll)
    manager = RemotePlaceManager.get()
    saved = manager.session, manager.loop, manager.resources, manager.unmanaged_resources

    class Session:
        loop = object()
    try:
        session = Session()
        labgrid_compat.adopt_session(session)
        assert (manager.session, manager.loop) == (session, session.loop)
        manager.resources, manager.unmanaged_resources = [1, 2, 3], [4, 5]
        labgrid_compat.forget_resources(lambda r: r % 2 == 0)
        assert (manager.resources, manager.unmanaged_resources) == ([1, 3], [5])
    finally:
        (manager.session, manager.loop, manager.resources,
         manager.unmanaged_resources) = saved


# -- patch 8: lab.labgrid_client's subclasses of labgrid's ClientSession ------------------------
# labgrid 26.0.1's ClientSession.start, which OnePlaceSession.start copies (without its
# subscriptions): a new labgrid's start fails here until the copy is checked against it
LABGRID_START_SHA256 = "08f680850fd8e28fbc0cd74a5cdb609241bc7fc877eaf96b2dd63162a179a845"
# what the copy leaves out or does otherwise: the two subscriptions (and the messages they
# send), the empty places and resources (the handed place's instead), labgrid's ServerError
NOT_COPIED = ("msg.subscribe.", "self.resources = {}", "self.places = {}", "raise ServerError(")


def test_patch_8_a_board_sessions_start_is_labgrids_without_its_subscriptions() -> None:
    import hashlib

    from labgrid.remote.client import ClientSession

    from benchfarm.lab.labgrid_client import OnePlaceSession
    start = inspect.getsource(ClientSession.start)
    assert hashlib.sha256(start.encode()).hexdigest() == LABGRID_START_SHA256, (
        "labgrid's ClientSession.start changed: check lab.labgrid_client.OnePlaceSession.start "
        "against it, then record its digest here")
    copy = inspect.getsource(OnePlaceSession.start)
    body = [ln.strip().replace("labgrid_coordinator_pb2.", "pb2.")
            for ln in start.split('"""')[2].splitlines() if ln.strip()]
    assert any(ln.startswith(NOT_COPIED[0]) for ln in body)
    for line in body:
        if not line.startswith(NOT_COPIED):
            assert line in copy, line
    assert "subscribe" not in copy and "raise OSError(" in copy


def test_patch_8_what_the_session_subclasses_rely_on_is_labgrids() -> None:
    from labgrid.remote.client import ClientSession
    from labgrid.remote.common import Place, ResourceEntry, ResourceMatch
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    # built as ClientSession(address, loop): IndexedSession replaces the channel and stub that
    # labgrid's __attrs_post_init__ makes; the rest of start's state is made there too
    assert [a.name for a in ClientSession.__attrs_attrs__][:2] == ["address", "loop"]
    post = inspect.getsource(ClientSession.__attrs_post_init__)
    for made in ("self.stopping = ", "self.channel = grpc.aio.insecure_channel(",
                 "self.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(self.channel)",
                 "self.out_queue = "):
        assert made in post, made
    # the updates' hooks it overrides, by their signatures, and what they keep current
    hooks = {"on_resource_changed": ["self", "exporter", "group_name", "resource_name",
                                     "resource"],
             "on_place_changed": ["self", "place_pb2"], "on_place_deleted": ["self", "name"]}
    for hook, params in hooks.items():
        assert list(inspect.signature(getattr(ClientSession, hook)).parameters) == params, hook
    assert "self.resources" in inspect.getsource(ClientSession.on_resource_changed)
    assert "self.places" in inspect.getsource(ClientSession.on_place_changed)
    for method in ("message_pump", "sync_with_coordinator", "stop", "close"):
        assert inspect.iscoroutinefunction(getattr(ClientSession, method)), method
    # the handed place, built as labgrid's own objects, and matched as labgrid matches
    place = Place(name="p", comment="", tags={}, created=0.0, changed=0.0,
                  matches=[ResourceMatch("e", "g", "NetworkSerialPort", None, None)])
    assert place.hasmatch(("e", "g", "NetworkSerialPort", "*"))
    assert place.getmatch(("e", "g", "NetworkSerialPort", "serial"))
    assert ResourceEntry({"cls": "NetworkSerialPort", "params": {}}).cls == "NetworkSerialPort"
    startup = pb2.ClientInMessage().startup.DESCRIPTOR.fields_by_name
    assert {"version", "name"} <= set(startup)
    assert "places" in pb2.GetPlacesResponse.DESCRIPTOR.fields_by_name


def test_every_rpc_of_the_coordinator_is_judged() -> None:
    """A call labgrid adds would be open to every certificate: this fails until a rule names it."""
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2
    methods = set(pb2.DESCRIPTOR.services_by_name["Coordinator"].methods_by_name)
    judged = ids.PLACE_ADMIN | ids.HOLDING | ids.READING | {"ClientStream", "ExporterStream"}
    assert methods == judged


SIGNING = "k" * 40     # a signing key as long as core.policy.trust asks


def _issuer_env(tmp_path) -> dict[str, str]:
    from benchfarm.lab.labgrid_pki import make_ca, write_private
    ca, key = make_ca("unit CA")
    write_private(tmp_path / "ca.crt", ca)
    write_private(tmp_path / "ca.key", key)
    return {"BENCHFARM_LABGRID_ISSUER_CERT": str(tmp_path / "ca.crt"),
            "BENCHFARM_LABGRID_ISSUER_KEY": str(tmp_path / "ca.key"),
            "BENCHFARM_LABGRID_CA": str(tmp_path / "ca.crt"), "BENCHFARM_SIGNING_KEY": SIGNING}


def test_each_session_gets_a_certificate_of_its_own_identity_only(tmp_path, monkeypatch) -> None:
    from benchfarm.api.outcomes import SessionKind
    from benchfarm.lab.labgrid_compat import TlsSettings
    from benchfarm.lab.labgrid_pki import expiry, grant_uris
    from benchfarm.operator.launch.credentials import SessionCredentials
    from benchfarm.operator.launch.launchers import Launch, ProcessLauncher
    env = _issuer_env(tmp_path)
    creds = SessionCredentials.from_settings(Settings.from_env(env))
    assert creds is not None and SessionCredentials.from_settings(Settings.from_env({})) is None
    for req, identity in [
            (Launch("ns", "r", "uid-1", 1, 0, deadline_s=600), "benchfarm/run-uid-1"),
            (Launch.lease_end("ns", "l", "uid-2", "vb-1"), "benchfarm/lease-uid-2"),
            (Launch.health_check("vb-1", "b-uid", 7, "ops", 300), "benchfarm/health-7-vb-1")]:
        got = creds.issue(req)
        # sealed: no key file, nothing readable without the signing key
        assert set(got) == {"BENCHFARM_LABGRID_SESSION"}
        assert "PRIVATE KEY" not in got["BENCHFARM_LABGRID_SESSION"]
        tls = TlsSettings.from_settings(Settings.from_env({**got, "BENCHFARM_SIGNING_KEY": SIGNING,
                                    "BENCHFARM_LABGRID_CA": str(tmp_path / "ca.crt")}))
        assert tls is not None and b"PRIVATE KEY" in tls.key
        assert tls.ca == (tmp_path / "ca.crt").read_bytes()
        assert grant_uris(tls.cert) == [f"labgrid:session:{identity}"] + \
            ([f"labgrid:place:{req.board}"] if req.board else []), req.kind
        left = expiry(tls.cert) - dt.datetime.now(dt.UTC)
        assert dt.timedelta(seconds=req.deadline_s) < left <= \
            dt.timedelta(seconds=req.deadline_s) + SessionCredentials.MARGIN
    assert req.kind == SessionKind.health_check
    assert not list(tmp_path.glob("**/labgrid.key"))
    for k, v in {**env, "BENCHFARM_LABGRID_CERT": "/op.crt", "BENCHFARM_LABGRID_KEY": "/op.key"}.items():
        monkeypatch.setenv(k, v)
    base = ProcessLauncher(tmp_path, credentials=creds,
                           environ=Settings.from_env().environ)._base_env()
    assert not {"BENCHFARM_LABGRID_CERT", "BENCHFARM_LABGRID_KEY", "BENCHFARM_LABGRID_ISSUER_KEY",
                "BENCHFARM_LABGRID_ISSUER_CERT"} & set(base)
    own = ProcessLauncher(tmp_path, environ=Settings.from_env().environ)._base_env()
    assert own["BENCHFARM_LABGRID_CERT"] == "/op.crt"


def test_a_sealed_credential_opens_only_with_the_signing_key_and_unaltered() -> None:
    from benchfarm.lab.labgrid_compat import TlsSettings
    from benchfarm.lab.labgrid_pki import seal, unseal
    sealed = seal(SIGNING.encode(), "CERT", b"KEY")
    assert unseal(SIGNING.encode(), sealed) == (b"CERT", b"KEY")
    assert seal(SIGNING.encode(), "CERT", b"KEY") != sealed       # a fresh nonce each time
    with pytest.raises(ValueError, match="cannot be unsealed"):
        unseal(b"x" * 40, sealed)
    raw = bytearray(base64.b64decode(sealed))
    raw[-1] ^= 1
    for bad in (base64.b64encode(bytes(raw)).decode(), "not base64!", ""):
        with pytest.raises(ValueError, match="cannot be unsealed"):
            unseal(SIGNING.encode(), bad)
    with pytest.raises(ValueError, match="BENCHFARM_LABGRID_CA"):
        TlsSettings.from_settings(Settings.from_env({"BENCHFARM_LABGRID_SESSION": sealed,
                                                     "BENCHFARM_SIGNING_KEY": SIGNING}))


def test_job_sessions_cold_warm_and_board_level_carry_their_own_sealed_certificate(tmp_path) -> None:
    """The job launcher hands each session its own certificate: in the Job's pod (cold, health
    check, lease end) and in a warm slot's signed grant, never the operator's."""
    from benchfarm.api.grants import SessionGrant
    from benchfarm.core.policy.trust import read_grant
    from benchfarm.lab.labgrid_compat import TlsSettings
    from benchfarm.lab.labgrid_pki import grant_uris
    from benchfarm.operator.launch.credentials import SessionCredentials, session_env
    from benchfarm.operator.launch.jobs import job_manifest
    from benchfarm.operator.launch.launchers import Launch
    from benchfarm.operator.launch.warm import WarmPool
    creds = SessionCredentials.from_settings(Settings.from_env(_issuer_env(tmp_path)))
    assert creds is not None
    template = {"metadata": {}, "spec": {"containers": [{"name": "session", "env": [
        {"name": "BENCHFARM_LABGRID_CA", "value": "/etc/benchfarm/labgrid/ca.crt"}]}]}}

    def uris(env: dict[str, str]) -> list[str]:
        tls = TlsSettings.from_settings(Settings.from_env({**env, "BENCHFARM_LABGRID_CA": str(tmp_path / "ca.crt"),
                                    "BENCHFARM_SIGNING_KEY": SIGNING}))
        assert tls is not None
        return grant_uris(tls.cert)

    for req in (Launch("ns", "r", "uid-1", 1, 0, deadline_s=600, board="vb-x86-0"),
                Launch.health_check("vb-1", "b-uid", 7, "ops", 300)):
        pod = job_manifest(req, template, "ops", env=session_env(req, creds))["spec"]["template"]
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert "BENCHFARM_LABGRID_CERT" not in env and "BENCHFARM_LABGRID_KEY" not in env
        assert f"labgrid:place:{req.board}" in uris(env)

    class Recorder:
        made: list[dict] = []

        def create_namespaced(self, kind, namespace, body):
            self.made.append(body)
            return True

    kube = Recorder()
    pool = WarmPool(kube, "ops", 1, SIGNING.encode(), lambda slot: {"spec": {}})
    req = Launch("ns", "r", "uid-9", 1, 0, deadline_s=600, board="vb-a53-0")
    pool.grant(req, {"metadata": {"name": "benchfarm-warm-1", "uid": "j-uid"}},
               session_env(req, creds))
    grant = read_grant(SIGNING.encode(), "benchfarm-warm-1", kube.made[-1]["data"])
    assert isinstance(grant, SessionGrant)
    assert uris(grant.env) == ["labgrid:session:benchfarm/run-uid-9", "labgrid:place:vb-a53-0"]
