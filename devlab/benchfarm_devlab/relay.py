"""The lab's services as pods see them: a TCP relay from the pods' host address to 127.0.0.1.

`python -m benchfarm_devlab.relay ADDRESS PORT...` listens on ADDRESS:PORT for each PORT and
copies every connection to 127.0.0.1:PORT, both ways, byte for byte (TLS, gRPC, raw serial: it
does not look inside). The lab's own listeners stay where they are (127.0.0.1, nothing to change
for the light lab, the CI or anyone's kubeconfig); the relay listens only on the address of the
cluster's bridge (config.HOST_ADDR), so only this machine and its pods can reach it. See
cluster.py for why a relay and not a DNAT to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import signal
import sys


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


def _handler(port: int):
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))
        for w in (client_w, server_w):
            w.close()
    return handle


async def main(address: str, ports: list[int]) -> None:
    servers = [await asyncio.start_server(_handler(p), address, p, reuse_address=True) for p in ports]
    print(f"relaying {address}:{{{','.join(map(str, ports))}}} -> 127.0.0.1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], [int(p) for p in sys.argv[2:]]))
