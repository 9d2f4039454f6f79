"""The exporter hosts' network: a network namespace of the lab's own, where the boards'
hardware lives, reached from the host only through the exporter hosts' SSH.

In a real lab the serial servers, the PDUs and pdudaemon sit on the exporter hosts' network,
and a client reaches them through the exporter host (labgrid's exporters in `--isolated` mode
publish each resource with `extra.proxy=<exporter host>`, `proxy_required`, and every labgrid
client forwards through that host's SSH: `labgrid.util.proxy.proxymanager`). The embedded lab
is one machine, so this module makes that network a namespace, `bf<PORT_BASE>-lab`, with only
its loopback. Inside it run the virtual lab (its consoles and power ports; each board's QEMU in a
network namespace of its own below it, boards.board_network), pdudaemon, both labgrid exporters
(each in a UTS namespace of its own, named as its exporter host, `vhost0`, `vhost1`:
benchfarm_devlab.exporter; the ser2net they start for a tty console listens in here as well)
and the exporter hosts' sshd (sshd.py). Its ports are its own port space: nothing of it listens
on the host.

Two crossings, each a relay (relay.py) through a UNIX socket under `STATE/labnet` (mode 0700,
the lab's user's only):

- host 127.0.0.1:PORTS.sshd -> `sshd.sock` -> the namespace's 127.0.0.1:PORTS.sshd (the sshd):
  the host's only way in. Sessions, the operator and the lab admin's `labgrid-client` reach it
  by the lab's ssh_config (BENCHFARM_SSH_CONFIG; Host vhost0, vhost1 ...), the one-node
  cluster's pods by the cluster's relay on the bridge address to the same port (cluster/).
- the namespace's 127.0.0.1:PORTS.coordinator -> `coordinator.sock` -> the host's coordinator:
  the exporters' way out. Nothing else of the host is reachable from the namespace.

Making a network namespace and entering it (`ip netns`, setns) needs root (CAP_SYS_ADMIN), as
the machine and the CI run the lab; anyone else gets a LabError that says so.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from benchfarm_devlab.config import PORT_BASE, PORTS, STATE, LabError
from benchfarm_devlab.processes import port_open, start_process

NETNS = f"bf{PORT_BASE}-lab"    # one lab network per port base, like the cluster's bridge
DIR = STATE / "labnet"
SSHD_SOCKET = DIR / "sshd.sock"
COORDINATOR_SOCKET = DIR / "coordinator.sock"
_CLONE_NEWNET = 0x40000000
# An address of each family beside the loopback ones, on the loopback too (documentation ranges,
# routed nowhere): with only 127.0.0.1 and ::1, glibc's getaddrinfo(AI_ADDRCONFIG) finds no
# address of either family, and the ser2net an exporter starts for a tty console refuses its
# listening port ("Unable to find a valid name on the name server").
ADDRESSES = ("198.51.100.1/32", "2001:db8::1/128")

T = TypeVar("T")


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def ensure() -> None:
    """The lab network, its loopback up (made once; kept across `lab up`s)."""
    if os.geteuid() != 0:
        raise LabError("the embedded lab puts its boards' consoles and power switches in a network"
                       f" namespace of its own ({NETNS}): that needs root (ip netns), and this "
                       f"process runs as uid {os.geteuid()}; run `make lab-up` as root")
    if shutil.which("ip") is None:
        raise LabError("the lab network needs `ip` (Debian package iproute2; `make deps`)")
    if not Path(f"/run/netns/{NETNS}").exists():
        res = _ip("netns", "add", NETNS)
        if res.returncode != 0:
            raise LabError(f"the lab network: ip netns add {NETNS}: {res.stderr.strip()}")
    for args in (("link", "set", "lo", "up"), *(("addr", "replace", a, "dev", "lo") for a in ADDRESSES)):
        res = _ip("-n", NETNS, *args)
        if res.returncode != 0:
            raise LabError(f"the lab network {NETNS}: ip {' '.join(args)}: {res.stderr.strip()}")
    DIR.mkdir(parents=True, exist_ok=True)
    DIR.chmod(0o700)


def inside(argv: list[str]) -> list[str]:
    """`argv` run in the lab network."""
    return ["ip", "netns", "exec", NETNS, *argv]


def run_inside(fn: Callable[[], T]) -> T:
    """`fn()` in a thread that has entered the lab network (setns is per thread; sockets it
    makes stay in the namespace they were made in): how the lab looks at its own ports."""
    out: dict[str, T | BaseException] = {}

    def run() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{NETNS}", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {NETNS}")
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as exc:   # handed to the caller's thread
            out["error"] = exc
    t = threading.Thread(target=run, name="labnet", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


def port_open_inside(port: int) -> bool:
    """Does something listen on 127.0.0.1:`port` in the lab network?"""
    try:
        return run_inside(lambda: port_open(port))
    except OSError:
        return False


def ssh_answers(port: int) -> bool:
    """An SSH server on 127.0.0.1:`port` (of the network this thread is in): its banner read,
    an identification of ours sent back before closing (a probe that says nothing is an error
    in the sshd's log)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            ok = s.recv(8).startswith(b"SSH-")
            s.sendall(b"SSH-2.0-benchfarm-ready-probe\r\n")
            return ok
    except OSError:
        return False


def ssh_answers_inside(port: int) -> bool:
    """`ssh_answers` in the lab network."""
    try:
        return run_inside(lambda: ssh_answers(port))
    except OSError:
        return False


def start_inner_relay() -> None:
    """The lab network's side of both crossings (start before the sshd and the exporters)."""
    ensure()
    argv = inside([sys.executable, "-m", "benchfarm_devlab.relay",
                   "--link", f"unix:{SSHD_SOCKET}", f"tcp:127.0.0.1:{PORTS.sshd}",
                   "--link", f"tcp:127.0.0.1:{PORTS.coordinator}", f"unix:{COORDINATOR_SOCKET}"])
    start_process("labnet-inner", argv, ports=[], restart_on_change=True, timeout=20,
                  ready=lambda: SSHD_SOCKET.exists() and port_open_inside(PORTS.coordinator))


def start_gate() -> None:
    """The host's side of both crossings; start after the sshd (sshd.start_sshd), which
    before the lab network listened on the host's PORTS.sshd itself."""
    argv = [sys.executable, "-m", "benchfarm_devlab.relay",
            "--link", f"tcp:127.0.0.1:{PORTS.sshd}", f"unix:{SSHD_SOCKET}",
            "--link", f"unix:{COORDINATOR_SOCKET}", f"tcp:127.0.0.1:{PORTS.coordinator}"]
    start_process("labnet-gate", argv, ports=[PORTS.sshd], restart_on_change=True, timeout=20,
                  ready=lambda: COORDINATOR_SOCKET.exists() and ssh_answers(PORTS.sshd))


def remove() -> bool:
    """Remove the lab network (`lab down`, after everything in it stopped); whether there was one."""
    if not Path(f"/run/netns/{NETNS}").exists():
        return False
    res = _ip("netns", "delete", NETNS)
    if res.returncode != 0:
        raise LabError(f"the lab network: ip netns delete {NETNS}: {res.stderr.strip()}")
    return True
