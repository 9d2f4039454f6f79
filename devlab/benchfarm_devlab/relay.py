"""Byte-for-byte relays between two endpoints, for what must cross a boundary the lab draws.

`python -m benchfarm_devlab.relay ADDRESS PORT...` listens on ADDRESS:PORT for each PORT and
copies every connection to 127.0.0.1:PORT, both ways (TLS, gRPC, SSH, raw serial: it does not
look inside). That is the one-node cluster's relay (`lab-gateway`): the lab's listeners stay on
127.0.0.1 and the relay listens only on the address of the cluster's bridge (config.HOST_ADDR),
so only this machine and its pods reach it. See cluster/ for why a relay and not a DNAT.

`python -m benchfarm_devlab.relay --link LISTEN CONNECT [--link ...]` copies each connection
accepted on LISTEN to CONNECT, where each is `tcp:HOST:PORT` or `unix:PATH` (a UNIX socket made
mode 0600 in a directory of its owner's). That is how the lab network (labnet.py) and the host
meet: a UNIX socket is reached from both network namespaces alike, and only by its owner, so
the exporter hosts' SSH and the coordinator each cross with one socket and nothing else does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.close()


def _handler(connect: Opener):
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await connect()
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))
        for w in (client_w, server_w):
            w.close()
    return handle


def _opener(endpoint: str) -> Opener:
    kind, _, where = endpoint.partition(":")
    if kind == "unix":
        return lambda: asyncio.open_unix_connection(where)
    host, _, port = where.rpartition(":")
    return lambda: asyncio.open_connection(host, int(port))


async def _listen(endpoint: str, connect: Opener) -> asyncio.Server:
    kind, _, where = endpoint.partition(":")
    if kind == "unix":
        Path(where).unlink(missing_ok=True)
        old = os.umask(0o177)     # the socket is its owner's only
        try:
            return await asyncio.start_unix_server(_handler(connect), path=where)
        finally:
            os.umask(old)
    if kind != "tcp":
        raise SystemExit(f"relay: endpoint {endpoint!r} is neither tcp:HOST:PORT nor unix:PATH")
    host, _, port = where.rpartition(":")
    return await asyncio.start_server(_handler(connect), host, int(port), reuse_address=True)


async def main(links: list[tuple[str, str]]) -> None:
    servers = [await _listen(listen, _opener(connect)) for listen, connect in links]
    print("relaying " + ", ".join(f"{a} -> {b}" for a, b in links), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


def parse(argv: list[str]) -> list[tuple[str, str]]:
    """The links of either command line (see the module's docstring)."""
    if argv and argv[0] == "--link":
        links = []
        while argv:
            if argv[0] != "--link" or len(argv) < 3:
                raise SystemExit("usage: relay --link LISTEN CONNECT [--link LISTEN CONNECT ...]")
            links.append((argv[1], argv[2]))
            argv = argv[3:]
        return links
    address, ports = argv[0], argv[1:]
    return [(f"tcp:{address}:{p}", f"tcp:127.0.0.1:{p}") for p in ports]


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
