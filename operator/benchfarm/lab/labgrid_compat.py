"""The one place benchfarm reaches into labgrid's internals: its coordinator protocol over mutual
TLS, the ssh_config of every ssh it starts, the identity of a client session and the
RemotePlaceManager a session's targets are expanded by. Written for labgrid 26.0.1
(`LABGRID_VERSION`); tests/unit/test_labgrid_identity.py fails when the labgrid code each patch
relies on changes (patches 1 to 7 there, by number). Its subclasses of labgrid's ClientSession
live beside it, in `lab.labgrid_client` (patch 8 there).

labgrid 26 speaks gRPC without TLS and believes the name a client sends ("host/user", from
LG_HOSTNAME/LG_USERNAME). Here:

- `channel`: the channel benchfarm's clients open (`lab.labgrid_client`), secure with the
  certificate the lab issued them when BENCHFARM_LABGRID_CA/_CERT/_KEY name one (`TlsSettings`),
  plain as before when they do not (a lab whose coordinator has no TLS).
- `secure_exporters`: labgrid's exporter opens the same secure channel (patch 1: its `Exporter`
  builds its channel in `__init__`; the subclass replaces it).
- `CheckingCoordinator` and `serve_checked`: labgrid's coordinator listening with TLS that
  requires a client certificate of the lab's CA (patch 2: `serve` calls `add_insecure_port`) and
  checking every stream's claimed name against the certificate (patch 3: `serve` builds the
  module's `Coordinator`), by the rules of `core.policy.identity`. A claim the certificate does not
  grant, or a call its role may not make, is refused with PERMISSION_DENIED and logged.
- `use_ssh_config` (patch 4): the lab's ssh_config for every ssh and rsync labgrid starts
  (staging, `LG_PROXY`'s forwards), through the class attribute labgrid calls them by.
- `claim_identity` (patch 5): a client session's `host/user` as this object says, not as
  LG_HOSTNAME/LG_USERNAME say (one process holds several identities: the operator's, a lease's).
- `adopt_session` and `forget_resources` (patches 6 and 7): labgrid's RemotePlaceManager expands a
  target's RemotePlace over benchfarm's own session (no second connection, no second sync of the
  whole lab), and forgets a closed target's resources (it polls every one it ever expanded).
"""

from __future__ import annotations

import logging
import types
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from labgrid.remote.generated import labgrid_coordinator_pb2_grpc

from benchfarm.api.grants import LABGRID_SESSION_ENV
from benchfarm.api.outcomes import LabFault
from benchfarm.core.policy import identity as ids
from benchfarm.errors import InfraError
from benchfarm.settings import Settings

LABGRID_VERSION = "26.0.1"
ENV_CA, ENV_CERT, ENV_KEY = "BENCHFARM_LABGRID_CA", "BENCHFARM_LABGRID_CERT", "BENCHFARM_LABGRID_KEY"
# a session's own certificate and key, sealed by the operator that launched it (`labgrid_pki.seal`)
ENV_SEALED = LABGRID_SESSION_ENV
log = logging.getLogger("benchfarm.labgrid")

# labgrid's own client and exporter channel options (keepalive), kept on the channels made here
CHANNEL_OPTIONS = [("grpc.keepalive_time_ms", 7500), ("grpc.keepalive_timeout_ms", 10000),
                   ("grpc.http2.ping_timeout_ms", 10000), ("grpc.http2.max_pings_without_data", 0)]


@dataclass(frozen=True)
class TlsSettings:
    """A client's (or the coordinator's) certificate and key, and the CA it trusts (PEM)."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def from_paths(cls, ca: str | Path, cert: str | Path, key: str | Path) -> TlsSettings:
        return cls(Path(ca).read_bytes(), Path(cert).read_bytes(), Path(key).read_bytes())

    @classmethod
    def from_settings(cls, s: Settings) -> TlsSettings | None:
        """From BENCHFARM_LABGRID_CA/_CERT/_KEY (file paths): None when none is set; all three
        or an error (a half-configured client would silently talk in the clear). A session
        the operator launched has BENCHFARM_LABGRID_SESSION instead of _CERT/_KEY: its own
        certificate and key, sealed (`labgrid_pki.unseal`, with the signing key)."""
        if s.labgrid_session:
            from benchfarm.core.policy.trust import key_from
            from benchfarm.lab.labgrid_pki import unseal
            if not s.labgrid_ca:
                raise ValueError(f"{ENV_SEALED} is set but not {ENV_CA}")
            cert, key = unseal(key_from(s.signing_key), s.labgrid_session)
            return cls(Path(s.labgrid_ca).read_bytes(), cert, key)
        paths = [s.labgrid_ca, s.labgrid_cert, s.labgrid_key]
        if not any(paths):
            return None
        if not all(paths):
            raise ValueError(f"set all of {ENV_CA}, {ENV_CERT} and {ENV_KEY}, or none")
        return cls.from_paths(*paths)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        """The coordinator's: only clients with a certificate of this CA get in."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)


def channel(target: str, options: list[tuple[str, Any]] | None, tls: TlsSettings | None, *,
            server_name: str | None = None) -> grpc.aio.Channel:
    """A channel to the coordinator: secure with `tls`, plain without (`TlsSettings.from_settings`
    says which). `server_name`: the name the coordinator's certificate is checked against when
    the target is a forward of it (LG_PROXY)."""
    opts = list(options or CHANNEL_OPTIONS)
    if tls is None:
        return grpc.aio.insecure_channel(target, options=opts)
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    return grpc.aio.secure_channel(target, tls.channel_credentials(), options=opts)


# -- patch 1: labgrid's exporter on a secure channel ---------------------------------------------
def secure_exporters(tls: TlsSettings) -> None:
    """Make labgrid's exporter (`labgrid.remote.exporter.main`, in this process) connect with
    `tls`: its `amain` builds the module's `Exporter`, which builds its insecure channel in
    `__init__` (labgrid 26.0.1)."""
    from labgrid.remote import exporter as lg_exporter
    base = lg_exporter.Exporter

    class SecureExporter(base):  # type: ignore[misc, valid-type]
        def __init__(self, config: dict[str, Any]) -> None:
            super().__init__(config)
            plain: grpc.aio.Channel = getattr(self, "channel")   # noqa: B009  (labgrid's, untyped)
            self.channel = channel(config["coordinator"], CHANNEL_OPTIONS, tls)
            self.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(self.channel)
            self.loop.create_task(plain.close())

    lg_exporter.Exporter = SecureExporter


# -- patches 2 and 3: labgrid's coordinator, checking who connects -----------------------------
def peer_grants(context: Any) -> list[ids.Grant]:
    """What the peer's certificate grants (nothing without one)."""
    from benchfarm.lab.labgrid_pki import grant_uris
    pems = context.auth_context().get("x509_pem_cert") or []
    if not pems:
        return []
    return ids.grants(grant_uris(pems[0]))


def _checking_class() -> type:
    from labgrid.remote.coordinator import Coordinator

    class CheckingCoordinator(Coordinator):
        """labgrid's coordinator, for clients and exporters with a certificate of the lab's CA: a
        stream's claimed name must be one its certificate grants, and each call one its role
        may make (core.policy.identity)."""

        refusals = 0

        async def _refuse(self, context: Any, what: str) -> None:
            type(self).refusals += 1
            log.warning("refused %s: %s", context.peer(), what)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, what)

        async def _checked(self, first: Any, rest: AsyncIterator[Any], context: Any,
                           allowed: Callable[[str], bool], kind: str) -> AsyncIterator[Any]:
            yield first
            async for msg in rest:
                if msg.WhichOneof("kind") == "startup" and not allowed(msg.startup.name):
                    await self._refuse(context, f"this certificate may not be {kind} "
                                                f"{msg.startup.name!r}")
                yield msg

        async def _opening(self, request_iterator: Any, context: Any,
                           allowed: Callable[[str], bool], kind: str) -> Any:
            """The stream's first message: its startup, with a name the certificate grants."""
            try:
                first = await request_iterator.__anext__()
            except StopAsyncIteration:
                return None
            name = first.startup.name if first.WhichOneof("kind") == "startup" else None
            if name is None or not allowed(name):
                await self._refuse(context, f"this certificate may not be {kind} {name!r}"
                                   if name is not None else "a stream must start with startup")
            return first

        async def ClientStream(self, request_iterator: Any, context: Any  # noqa: N802
                               ) -> AsyncIterator[Any]:
            held = peer_grants(context)
            allowed = lambda name: ids.may_claim(held, name)  # noqa: E731
            first = await self._opening(request_iterator, context, allowed, "client")
            if first is None:
                return
            checked = self._checked(first, request_iterator, context, allowed, "client")
            async for out in super().ClientStream(checked, context):
                yield out

        async def ExporterStream(self, request_iterator: Any, context: Any  # noqa: N802
                                 ) -> AsyncIterator[Any]:
            held = peer_grants(context)
            allowed = lambda name: ids.may_export(held, name)  # noqa: E731
            first = await self._opening(request_iterator, context, allowed, "exporter")
            if first is None:
                return
            checked = self._checked(first, request_iterator, context, allowed, "exporter")
            async for out in super().ExporterStream(checked, context):
                yield out

    def guarded(method: str) -> Callable[..., Any]:
        base = getattr(Coordinator, method)

        async def call(self: Any, request: Any, context: Any) -> Any:
            held = peer_grants(context)
            session = self.clients.get(context.peer())
            claimed: str | None = session.name if session is not None else None
            if claimed is None or not ids.may_call(held, claimed, method):
                await self._refuse(context, f"{claimed or 'a client without a stream'} may not "
                                            f"call {method}")
                return None
            if method == "AcquirePlace" and not ids.may_acquire(held, claimed, request.placename):
                await self._refuse(context, f"{claimed} may not acquire {request.placename}: "
                                            "its certificate names other places")
            if method == "ReleasePlace" and ids.role(held, claimed) != "operator":
                place = self.places.get(request.placename)
                fromuser = request.fromuser if request.HasField("fromuser") else claimed
                if fromuser != claimed or (place is not None and
                                           not ids.may_release(held, claimed, place.acquired)):
                    await self._refuse(context, f"{claimed} may not release a place "
                                                f"{place.acquired if place else 'nobody'} holds")
                request.fromuser = claimed     # checked and released in one step, under its lock
            return await base(self, request, context)
        call.__name__ = method
        return call

    for method in sorted(ids.PLACE_ADMIN | ids.HOLDING | ids.READING):
        setattr(CheckingCoordinator, method, guarded(method))
    return CheckingCoordinator


def serve_checked(tls: TlsSettings) -> type:
    """Make labgrid's coordinator `main` (in this process) listen with `tls`, requiring client
    certificates of its CA, and check every client (`CheckingCoordinator`); returns that class.
    `serve` builds the module's `Coordinator` and calls `grpc.aio.server(...).add_insecure_port`
    (labgrid 26.0.1): the module gets the checking class and a `grpc` whose server binds that
    port with TLS instead."""
    from labgrid.remote import coordinator as lg_coordinator
    checking = _checking_class()
    credentials = tls.server_credentials()

    def server(*args: Any, **kwargs: Any) -> grpc.aio.Server:
        srv = grpc.aio.server(*args, **kwargs)
        srv.add_insecure_port = lambda address: srv.add_secure_port(address, credentials)  # type: ignore[method-assign]
        return srv

    aio = types.SimpleNamespace(**{k: getattr(grpc.aio, k) for k in dir(grpc.aio)
                                   if not k.startswith("__")})
    aio.server = server
    shim = types.ModuleType("grpc")
    shim.__dict__.update({k: v for k, v in vars(grpc).items() if not k.startswith("__")})
    shim.aio = aio  # type: ignore[attr-defined]
    lg_coordinator.grpc = shim
    lg_coordinator.Coordinator = checking
    return checking


def labgrid_version_matches() -> bool:
    from labgrid.util import labgrid_version
    return str(labgrid_version()).split("+")[0] == LABGRID_VERSION


# -- patch 4: the lab's ssh_config for every ssh labgrid starts ---------------------------------
def use_ssh_config(path: str) -> None:
    """Give labgrid's ssh and rsync this ssh_config (none: nothing changes); idempotent.
    labgrid calls `SSHConnection._get_ssh_base_args()` by its class name: only the class
    attribute reaches every ssh it starts (master, commands, rsync's -e, proxy forwards)."""
    if not path:
        return
    if " " in path:   # rsync -e joins ssh's arguments with spaces
        raise InfraError(f"BENCHFARM_SSH_CONFIG {path!r} has a space in it",
                         reason=LabFault.staging_failed)
    from labgrid.util.ssh import SSHConnection
    base = _SSH_BASE_ARGS.setdefault("base", SSHConnection._get_ssh_base_args)
    SSHConnection._get_ssh_base_args = staticmethod(lambda: [*base(), "-F", path])


_SSH_BASE_ARGS: dict[str, Callable[[], list[str]]] = {}   # labgrid's own, before patch 4


# -- patch 5: a client session's identity --------------------------------------------------------
def claim_identity(session: Any, host: str, user: str) -> None:
    """`session` (a labgrid ClientSession) is `host/user` whatever the environment says: labgrid
    reads LG_HOSTNAME/LG_USERNAME in its `gethostname`/`getuser`, which every check of who
    acquired a place calls on the session."""
    session.gethostname, session.getuser = (lambda: host), (lambda: user)


# -- patches 6 and 7: the RemotePlaceManager over benchfarm's session ----------------------------
def adopt_session(session: Any) -> None:
    """labgrid's RemotePlaceManager (one a process) expands RemotePlaces over `session`."""
    from labgrid.resource.remote import RemotePlaceManager
    manager = RemotePlaceManager.get()
    if manager.session is not session:
        manager.session, manager.loop = session, session.loop


def forget_resources(doomed: Callable[[Any], bool]) -> None:
    """Drop the resources `doomed` names from the RemotePlaceManager, which keeps and polls every
    resource it ever expanded."""
    from labgrid.resource.remote import RemotePlaceManager
    manager = RemotePlaceManager.get()
    manager.resources = [r for r in manager.resources if not doomed(r)]
    manager.unmanaged_resources = [r for r in manager.unmanaged_resources if not doomed(r)]
