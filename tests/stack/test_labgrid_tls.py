"""labgrid's coordinator as the embedded lab runs it (`benchfarm_devlab.coordinator`), with mutual
TLS: a real coordinator process, real certificates of a CA made here, real labgrid clients
(benchfarm's `Coordinator`, labgrid's own exporter and `labgrid-client`). No lab needed: each test
starts its own coordinator on a loopback port.

An identity is the certificate's, not the claim: a client whose certificate does not grant the
name it claims gets nothing; a plain client cannot connect; a person's certificate reads but
never acquires, releases or changes a place; a session releases only its own hold.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchfarm.errors import InfraError, Outage
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.labgrid_compat import TlsSettings
from benchfarm.lab.labgrid_pki import Issuer, make_ca, write_private
from benchfarm.settings import Settings

pytestmark = pytest.mark.stack
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pki:
    def __init__(self, root: Path) -> None:
        self.root = root
        ca, key = make_ca("test labgrid CA")
        write_private(root / "ca.crt", ca)
        write_private(root / "ca.key", key)
        self.issuer = Issuer.load(root / "ca.crt", root / "ca.key")

    def tls(self, name: str, grants: list[tuple[str, str]] = (), servers: list[str] = (),  # type: ignore[assignment]
            issuer: Issuer | None = None, **kw) -> TlsSettings:
        cert, key = (issuer or self.issuer).issue_with_key(common_name=name, grants=list(grants),
                                                           server_names=list(servers), **kw)
        write_private(self.root / f"{name}.crt", cert)
        write_private(self.root / f"{name}.key", key)
        return TlsSettings((self.root / "ca.crt").read_bytes(), cert.encode(), key)

    def env(self, name: str) -> dict[str, str]:
        return {"BENCHFARM_LABGRID_CA": str(self.root / "ca.crt"),
                "BENCHFARM_LABGRID_CERT": str(self.root / f"{name}.crt"),
                "BENCHFARM_LABGRID_KEY": str(self.root / f"{name}.key")}


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the process ended"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[tuple[str, Pki, Path]]:
    """A coordinator with TLS on a free loopback port, an exporter of one board group
    `board-1` (a network serial port and a power port, nothing behind them), the place."""
    pki = Pki(tmp_path)
    pki.tls("coordinator", servers=["127.0.0.1", "localhost"])
    pki.tls("exporter-a", grants=[("exporter", "exporter-a")])
    pki.tls("admin", grants=[("operator", "*")])
    port = free_port()
    address = f"127.0.0.1:{port}"
    log = tmp_path / "coordinator.log"
    procs = []
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_LABGRID_")}
    with open(log, "w") as out:
        coord = subprocess.Popen([str(BIN / "python"), "-m", "benchfarm_devlab.coordinator",
                                  "--listen", address], cwd=tmp_path, stdout=out,
                                 stderr=subprocess.STDOUT, env={**base_env, **pki.env("coordinator")})
        procs.append(coord)
        try:
            wait_port(port, coord)
            cfg = tmp_path / "exporter.yaml"
            cfg.write_text("board-1:\n  NetworkSerialPort: {host: 127.0.0.1, port: 9, speed: 115200}\n"
                           "  NetworkPowerPort: {model: simplerest, index: 1,"
                           " host: 'http://127.0.0.1:9/outlet/{index}/{value}'}\n")
            exporter = subprocess.Popen(
                [str(BIN / "python"), "-m", "benchfarm_devlab.exporter", "--coordinator", address,
                 "--name", "exporter-a", "--hostname", "127.0.0.1", str(cfg)],
                stdout=out, stderr=subprocess.STDOUT, env={**base_env, **pki.env("exporter-a")})
            procs.append(exporter)
            admin = Coordinator(address, user="lab-admin", host="benchfarm-lab",
                                tls=TlsSettings.from_settings(Settings.from_env(pki.env("admin"))))
            try:
                deadline = time.monotonic() + 30
                while len(admin.resources().get("exporter-a", [])) < 2:
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.2)
                admin.ensure_place("board-1", match="exporter-a/board-1/*", tags={})
            finally:
                admin.close()
            yield address, pki, log
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(timeout=10)


def client(address: str, tls: TlsSettings | None, host: str, user: str) -> Coordinator:
    return Coordinator(address, host=host, user=user, tls=tls, timeout=8)


def test_exporter_with_its_own_certificate_serves_its_place(coordinator) -> None:
    address, pki, _ = coordinator
    c = client(address, pki.tls("op", grants=[("operator", "benchfarm/*")]), "benchfarm", "run-a")
    try:
        place = c.places()["board-1"]
        assert set(place.resources) == {"NetworkSerialPort", "NetworkPowerPort"}
    finally:
        c.close()


def test_plain_client_cannot_connect(coordinator) -> None:
    address, _, _ = coordinator
    c = client(address, None, "benchfarm", "run-a")
    try:
        with pytest.raises(Outage):
            c.places()
    finally:
        c.close()


def test_certificate_of_another_ca_cannot_connect(coordinator, tmp_path: Path) -> None:
    address, pki, _ = coordinator
    other = Pki(tmp_path / "other")
    forged = other.tls("rogue", grants=[("operator", "*")])
    tls = TlsSettings((pki.root / "ca.crt").read_bytes(), forged.cert, forged.key)
    c = client(address, tls, "benchfarm", "run-a")
    try:
        with pytest.raises(Outage):
            c.places()
    finally:
        c.close()


def test_expired_certificate_cannot_connect(coordinator) -> None:
    address, pki, _ = coordinator
    import datetime as dt
    gone = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    c = client(address, pki.tls("expired", grants=[("person", "desk/carol")], not_after=gone),
               "desk", "carol")
    try:
        with pytest.raises(Outage):
            c.places()
    finally:
        c.close()


def test_a_claim_the_certificate_does_not_grant_gets_nothing(coordinator) -> None:
    """A session's certificate claiming another run; a person's claiming a run or another person."""
    address, pki, log = coordinator
    holder = client(address, pki.tls("run-a", grants=[("session", "benchfarm/run-a")]),
                    "benchfarm", "run-a")
    try:
        holder.acquire("board-1")
        for cert, (host, user) in [
                (pki.tls("run-b", grants=[("session", "benchfarm/run-b")]), ("benchfarm", "run-a")),
                (pki.tls("carol", grants=[("person", "desk/carol")]), ("benchfarm", "run-a")),
                (pki.tls("carol", grants=[("person", "desk/carol")]), ("desk", "dave"))]:
            forger = client(address, cert, host, user)
            try:
                with pytest.raises(Outage):
                    forger.places()
            finally:
                forger.close()
        assert holder.holder("board-1") == "benchfarm/run-a"
        assert "refused" in log.read_text() and "may not be client 'benchfarm/run-a'" in log.read_text()
    finally:
        holder.release("board-1")
        holder.close()


def test_an_exporter_certificate_is_no_client_and_no_other_exporter(coordinator) -> None:
    address, pki, log = coordinator
    cert = pki.tls("exporter-b", grants=[("exporter", "exporter-b")])
    c = client(address, cert, "benchfarm", "run-a")
    try:
        with pytest.raises(Outage):
            c.places()
    finally:
        c.close()
    cfg = pki.root / "exporter-b.yaml"
    cfg.write_text("board-1:\n  NetworkSerialPort: {host: 127.0.0.1, port: 9, speed: 115200}\n")
    res = subprocess.run(
        [str(BIN / "python"), "-m", "benchfarm_devlab.exporter", "--coordinator", address,
         "--name", "exporter-a", "--hostname", "127.0.0.1", str(cfg)],
        env={**os.environ, **pki.env("exporter-b")}, capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    # the coordinator refused the stream; the exporter hears it as PERMISSION_DENIED, or, when
    # its own send was under way as the stream closed, as grpc's INTERNAL (seen once under load)
    assert "PERMISSION_DENIED" in res.stdout + res.stderr or \
        "may not be exporter 'exporter-a'" in log.read_text(), res.stderr[-2000:]
    assert "may not be exporter 'exporter-a'" in log.read_text()


def test_a_person_reads_but_never_takes_or_frees_a_place(coordinator) -> None:
    address, pki, _ = coordinator
    run = client(address, pki.tls("run-a", grants=[("session", "benchfarm/run-a")]),
                 "benchfarm", "run-a")
    person = client(address, pki.tls("carol", grants=[("person", "desk/carol")]), "desk", "carol")
    try:
        assert "board-1" in person.places()
        with pytest.raises(InfraError, match="may not call AcquirePlace"):
            person.acquire("board-1")
        run.acquire("board-1")
        with pytest.raises(InfraError, match="may not call ReleasePlace"):
            person._call(person._rpc("ReleasePlace", _release("board-1")))
        with pytest.raises(InfraError, match="may not call AddPlace"):
            person.ensure_place("board-2", match="exporter-a/board-1/*", tags={})
        assert run.holder("board-1") == "benchfarm/run-a"
    finally:
        run.release("board-1")
        run.close()
        person.close()


def test_a_session_releases_only_its_own_hold(coordinator) -> None:
    address, pki, _ = coordinator
    run_a = client(address, pki.tls("run-a", grants=[("session", "benchfarm/run-a")]),
                   "benchfarm", "run-a")
    run_b = client(address, pki.tls("run-b", grants=[("session", "benchfarm/run-b")]),
                   "benchfarm", "run-b")
    try:
        run_a.acquire("board-1")
        with pytest.raises(InfraError, match="may not release"):
            run_b._call(run_b._rpc("ReleasePlace", _release("board-1")))
        with pytest.raises(InfraError, match="may not call AddPlace"):
            run_b.ensure_place("board-2", match="exporter-a/board-1/*", tags={})
        assert run_b.holder("board-1") == "benchfarm/run-a"
        assert run_a.release("board-1")
        assert run_b.holder("board-1") is None
    finally:
        run_a.close()
        run_b.close()


def _release(place: str):  # noqa: ANN202
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2
    return pb2.ReleasePlaceRequest(placename=place)


def test_stock_labgrid_client_through_the_forwarder_is_its_certificate(coordinator) -> None:
    """labgrid's own `labgrid-client`, plaintext into the loopback forwarder, TLS with a person's
    certificate out: it sees the place it is allowed on as that person; claiming anyone else
    through the same forwarder, it gets nothing."""
    from benchfarm.lab.labgrid_forward import Forwarder, client_context
    address, pki, _ = coordinator
    lease = client(address, pki.tls("op", grants=[("operator", "benchfarm/*")]),
                   "benchfarm", "lease-a")
    pki.tls("carol", grants=[("person", "desk/carol")])
    files = pki.env("carol")
    ctx = client_context(files["BENCHFARM_LABGRID_CA"], files["BENCHFARM_LABGRID_CERT"],
                         files["BENCHFARM_LABGRID_KEY"])
    try:
        lease.acquire("board-1")
        lease.allow("board-1", "desk/carol")
        with Forwarder(address, ctx) as fwd:
            def lg(user: str, *args: str) -> subprocess.CompletedProcess:
                host, _, name = user.partition("/")
                env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_LABGRID")}
                return subprocess.run([str(BIN / "labgrid-client"), "-p", "board-1", *args],
                                      env={**env, "LG_COORDINATOR": fwd.address,
                                           "LG_HOSTNAME": host, "LG_USERNAME": name},
                                      capture_output=True, text=True, timeout=60)
            ok = lg("desk/carol", "show")
            assert ok.returncode == 0, ok.stderr
            assert "acquired: benchfarm/lease-a" in ok.stdout and "desk/carol" in ok.stdout
            forged = lg("benchfarm/lease-a", "show")
            assert forged.returncode != 0 and "acquired:" not in forged.stdout
            taken = lg("desk/carol", "release")
            assert taken.returncode != 0
        assert lease.holder("board-1") == "benchfarm/lease-a"
    finally:
        lease.release("board-1")
        lease.close()


def test_a_session_certificate_that_names_its_board_takes_no_other(coordinator) -> None:
    address, pki, _ = coordinator
    op = client(address, pki.tls("op", grants=[("operator", "operator/benchfarm")]),
                "operator", "benchfarm")
    run = client(address, pki.tls("run-c", grants=[("session", "benchfarm/run-c"),
                                                   ("place", "board-2")]), "benchfarm", "run-c")
    try:
        op.ensure_place("board-2", match="exporter-a/board-1/*", tags={})
        with pytest.raises(InfraError, match="may not acquire board-1"):
            run.acquire("board-1")
        assert op.holder("board-1") is None
        run.acquire("board-2")
        assert run.release("board-2")
    finally:
        op.delete_places(["board-2"])
        op.close()
        run.close()


def test_a_second_startup_cannot_change_who_a_stream_is(coordinator) -> None:
    """labgrid's coordinator takes a client's name from every startup message of its stream: a
    client that starts as itself and then sends a startup with another name is cut off, and
    what it then asks is refused; the place stays its holder's."""
    import asyncio

    import grpc
    from labgrid.remote.generated import (
        labgrid_coordinator_pb2 as pb2,
        labgrid_coordinator_pb2_grpc as pb2_grpc,
    )

    from benchfarm.lab.labgrid_compat import channel
    address, pki, log = coordinator
    holder = client(address, pki.tls("run-a", grants=[("session", "benchfarm/run-a")]),
                    "benchfarm", "run-a")
    tls = pki.tls("run-b", grants=[("session", "benchfarm/run-b")])

    async def forge() -> tuple[str, str]:
        ch = channel(address, None, tls)
        stub = pb2_grpc.CoordinatorStub(ch)
        queue: asyncio.Queue = asyncio.Queue()

        async def requests():
            while (msg := await queue.get()) is not None:
                yield msg
        for name in ("benchfarm/run-b", "benchfarm/run-a"):
            msg = pb2.ClientInMessage()
            msg.startup.version, msg.startup.name = "26.0.1", name
            queue.put_nowait(msg)
        call = stub.ClientStream(requests())
        stream = "open"
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as exc:
            stream = exc.code().name
        try:
            await stub.ReleasePlace(pb2.ReleasePlaceRequest(placename="board-1"), timeout=5)
            release = "OK"
        except grpc.aio.AioRpcError as exc:
            release = exc.code().name
        queue.put_nowait(None)
        await ch.close()
        return stream, release
    try:
        holder.acquire("board-1")
        stream, release = asyncio.run(asyncio.wait_for(forge(), 30))
        assert stream == "PERMISSION_DENIED", stream
        assert release in ("PERMISSION_DENIED", "FAILED_PRECONDITION"), release
        assert holder.holder("board-1") == "benchfarm/run-a"
        assert "may not be client 'benchfarm/run-a'" in log.read_text()
    finally:
        holder.release("board-1")
        holder.close()
