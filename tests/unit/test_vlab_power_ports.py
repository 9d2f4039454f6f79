"""The virtual PDU's endpoints (exporters/virtual/vlab.py), served for real on ephemeral ports and
a UNIX socket: a board's power port answers its own outlet, rails, QMP state and plug and nothing
else (another board's index, the test hooks: 404), and the lab's control socket answers every
route and is its user's only (mode 0600). No QEMU is started: nothing here powers a board on."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import stat
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _vlab():
    spec = importlib.util.spec_from_file_location("vlab", REPO / "exporters/virtual/vlab.py")
    vlab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vlab)
    return vlab


class _Broker:
    """A board's serial broker as the chaos hooks use it (no clients here)."""

    def disconnect(self) -> int:
        return 0

    def garbage(self) -> None:
        pass


async def _get(open_conn, path: str) -> tuple[int, str]:
    reader, writer = await open_conn()
    writer.write(f"GET {path} HTTP/1.1\r\nHost: vlab\r\n\r\n".encode())
    await writer.drain()
    head, _, body = (await reader.read()).decode().partition("\r\n\r\n")
    writer.close()
    return int(head.split()[1]), body


def test_a_boards_power_port_serves_that_board_only_and_the_control_socket_everything(tmp_path):
    vlab = _vlab()
    rails = [{"name": "vdd", "voltage": 1.0, "model": {"off": 0.5, "idle": 1, "active": 2}}]
    outlets = []
    for i in range(2):
        outlet = vlab.Outlet({"name": f"b{i}", "rails": rails, "qemu_argv": ["false"],
                              "qmp_socket": str(tmp_path / f"qmp{i}")}, tmp_path)
        outlet.broker = _Broker()
        outlets.append(outlet)
    pdu = vlab.PDU(outlets)
    control = tmp_path / "control.sock"

    async def scenario() -> dict[str, tuple[int, str]]:
        board1 = await pdu.serve_board(1, 0)
        port = board1.sockets[0].getsockname()[1]
        await pdu.serve_control(control)
        tcp = lambda: asyncio.open_connection("127.0.0.1", port)       # noqa: E731
        unix = lambda: asyncio.open_unix_connection(str(control))      # noqa: E731
        out = {}
        for path in ("/outlet/1/", "/rails/1", "/qmp/1", "/tasmota/1/cm?cmnd=Power1%20off",
                     "/outlet/0/", "/outlet/0/1", "/outlet/01/", "/rails/0", "/qmp/0",
                     "/tasmota/0/cm?cmnd=Power1%20on", "/fault/1/panic", "/chaos/1/hang",
                     "/chaos/1/disconnect", "/network/1/open", "/", "/outlet"):
            out[f"board {path}"] = await _get(tcp, path)
        for path in ("/outlet/0/", "/rails/0", "/fault/0/panic", "/chaos/1/disconnect"):
            out[f"control {path}"] = await _get(unix, path)
        return out

    got = asyncio.run(scenario())
    assert got["board /outlet/1/"] == (200, "0")
    assert json.loads(got["board /rails/1"][1])["rails"]["vdd"]["voltage"] == 1.0
    assert json.loads(got["board /qmp/1"][1])["status"] == "off"
    assert got["board /tasmota/1/cm?cmnd=Power1%20off"] == (200, '{"POWER1": "OFF"}')
    for path in ("/outlet/0/", "/outlet/0/1", "/outlet/01/", "/rails/0", "/qmp/0",
                 "/tasmota/0/cm?cmnd=Power1%20on", "/fault/1/panic", "/chaos/1/hang",
                 "/chaos/1/disconnect", "/network/1/open", "/", "/outlet"):
        assert got[f"board {path}"][0] == 404, (path, got[f"board {path}"])
    assert not outlets[0].is_on and outlets[1].fault == "none"   # nothing it asked was done
    assert got["control /outlet/0/"] == (200, "0")
    assert got["control /rails/0"][0] == 200
    assert got["control /fault/0/panic"] == (200, "panic") and outlets[0].fault == "panic"
    assert got["control /chaos/1/disconnect"] == (200, "dropped 0 client(s)\n")
    assert stat.S_IMODE(control.stat().st_mode) == 0o600
