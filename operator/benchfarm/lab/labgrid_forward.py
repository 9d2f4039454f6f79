"""A loopback forwarder to labgrid's coordinator: plaintext HTTP/2 from the stock `labgrid-client`
in, TLS with a person's (or the lab's) certificate out.

labgrid 26's client speaks gRPC without TLS only. A person with a lease holds a certificate the
operator issued for the lease's user, expiring with the lease (`BoardLease.status.access`);
`benchfarm lease --shell` starts this forwarder on 127.0.0.1 and points LG_COORDINATOR at it, so
`labgrid-client -p $LG_PLACE console` and `power` work as before, with the person's certificate:
the coordinator lets it be the lease's user and nothing else. The bytes are gRPC's HTTP/2 frames
as they are; only the connection under them is TLS (ALPN h2).

The lab admin's stock client goes the same way: `python -m benchfarm.lab.labgrid_forward
labgrid-client ...` (what the embedded lab's `.benchfarm/bin/labgrid-client` runs) starts a
forwarder with the certificate of BENCHFARM_LABGRID_CA/_CERT/_KEY, runs the command with
LG_COORDINATOR pointed at it, and closes it when the command ends. Nothing listens when no
command runs.

labgrid's client reaches a place's console and power through the SSH of the exporter host each
resource names (`extra.proxy`), and has no variable for an ssh_config. So a command named
`labgrid-client` runs as labgrid's own client in a Python of ours (`--stock-client`) with the
ssh_config of BENCHFARM_SSH_CONFIG given to every ssh it starts (`labgrid_compat.use_ssh_config`):
the lab's for the lab admin, the lease's key and certificate for a lease shell (whose
`labgrid-client` is `python -m benchfarm.lab.labgrid_forward --stock-client`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from benchfarm.settings import Settings

CHUNK = 65536
STOCK_CLIENT = "labgrid-client"      # a command of this name is labgrid's own client


def client_context(ca: str | Path, cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """TLS to the coordinator: its certificate checked against `ca`, ours presented, HTTP/2."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["h2"])
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class Forwarder:
    """Listens on 127.0.0.1 (a free port); each connection is piped to `target` over TLS."""

    def __init__(self, target: str, context: ssl.SSLContext, *, server_name: str | None = None,
                 port: int = 0) -> None:
        host, _, tport = target.rpartition(":")
        self.host, self.port = host.strip("[]"), int(tport)
        self.server_name = server_name or self.host
        self.context = context
        self.errors: list[str] = []      # why connections to the coordinator failed
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="labgrid-forward",
                                        daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", port), self._loop).result(10)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.context, server_hostname=self.server_name)
        except (OSError, ssl.SSLError) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(CHUNK):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except asyncio.CancelledError:     # closed under the client: the connection goes quietly
            for w in (writer, up_writer):
                w.close()

    def close(self) -> None:
        async def _close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def client_command(command: Sequence[str]) -> list[str]:
    """`command`, where it is labgrid's client (named `labgrid-client`), as that client run by
    this module with the settings' ssh_config (`stock_client`)."""
    if command and Path(command[0]).name == STOCK_CLIENT:
        return [sys.executable, "-m", "benchfarm.lab.labgrid_forward", "--stock-client",
                *command[1:]]
    return list(command)


def stock_client(argv: Sequence[str], settings: Settings) -> int:
    """labgrid's own `labgrid-client ARGV`, here, every ssh it starts given the settings'
    ssh_config (none: ssh's defaults)."""
    from labgrid.remote.client import main as labgrid_client

    from benchfarm.lab.labgrid_compat import use_ssh_config
    use_ssh_config(settings.ssh_config)
    sys.argv = [STOCK_CLIENT, *argv]
    try:
        labgrid_client()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def run(command: Sequence[str], settings: Settings) -> int:
    """`command` with LG_COORDINATOR at a forwarder to the settings' coordinator, with their
    labgrid certificate (BENCHFARM_LABGRID_CA/_CERT/_KEY); as it is without one (a coordinator
    that takes plain gRPC, or a lease shell, whose LG_COORDINATOR is its lease's forwarder).
    labgrid's client gets the settings' ssh_config (`client_command`)."""
    env = dict(settings.environ)
    argv = client_command(command)
    if not (settings.labgrid_ca and settings.labgrid_cert and settings.labgrid_key):
        return subprocess.call(argv, env=env)
    context = client_context(settings.labgrid_ca, settings.labgrid_cert, settings.labgrid_key)
    with Forwarder(settings.coordinator, context) as forwarder:
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)   # the client's to handle
        try:
            return subprocess.call(argv, env={**env, "LG_COORDINATOR": forwarder.address})
        finally:
            signal.signal(signal.SIGINT, interrupt)


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m benchfarm.lab.labgrid_forward COMMAND [ARG...]\n"
              "       python -m benchfarm.lab.labgrid_forward --stock-client [ARG...]",
              file=sys.stderr)
        return 2
    if argv[0] == "--stock-client":
        return stock_client(argv[1:], Settings.from_env())
    return run(argv, Settings.from_env())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
