"""The embedded lab's relays (devlab relay.py): the cluster's command line and the lab network's
links, and one crossing as the lab network makes it (TCP -> UNIX socket -> TCP), on loopback."""

from __future__ import annotations

import asyncio
import os
import socket
import stat

from benchfarm_devlab import relay


def test_the_clusters_command_line_relays_each_port_to_the_same_on_loopback():
    assert relay.parse(["10.244.210.1", "21443", "21022"]) == [
        ("tcp:10.244.210.1:21443", "tcp:127.0.0.1:21443"),
        ("tcp:10.244.210.1:21022", "tcp:127.0.0.1:21022")]


def test_links_are_pairs_of_endpoints():
    assert relay.parse(["--link", "unix:/s/a.sock", "tcp:127.0.0.1:22",
                        "--link", "tcp:127.0.0.1:1", "unix:/s/b.sock"]) == [
        ("unix:/s/a.sock", "tcp:127.0.0.1:22"), ("tcp:127.0.0.1:1", "unix:/s/b.sock")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_crossing_through_a_unix_socket_copies_both_ways_and_the_socket_is_its_owners(tmp_path):
    sock = tmp_path / "cross.sock"
    front, back = _free_port(), _free_port()

    async def scenario() -> tuple[bytes, int]:
        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(b"echo:" + await r.readline())
            await w.drain()
            w.close()
        server = await asyncio.start_server(echo, "127.0.0.1", back)
        task = asyncio.create_task(relay.main([
            (f"tcp:127.0.0.1:{front}", f"unix:{sock}"),       # the host's side
            (f"unix:{sock}", f"tcp:127.0.0.1:{back}")]))      # the other side
        while not sock.exists():
            await asyncio.sleep(0.01)
        mode = stat.S_IMODE(os.stat(sock).st_mode)
        r, w = await asyncio.open_connection("127.0.0.1", front)
        w.write(b"hello\n")
        await w.drain()
        answer = await asyncio.wait_for(r.read(), 5)
        w.close()
        task.cancel()
        server.close()
        return answer, mode
    answer, mode = asyncio.run(scenario())
    assert answer == b"echo:hello\n"
    assert mode == 0o600
